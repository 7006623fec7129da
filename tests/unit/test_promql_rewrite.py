"""The rewrite that lets alert expressions be checked for series without their thresholds."""

from __future__ import annotations

from tests.support.prometheus import every_value


def test_comparisons_get_bool_outside_selectors() -> None:
    expr = 'max by (p) (x{code=~"5..",a!="b"} == 1) > 0.5 and y{l="v"} < bool 2 unless z >= 3'
    assert every_value(expr) == (
        'max by (p) (x{code=~"5..",a!="b"} == bool 1) > bool 0.5 and y{l="v"} < bool 2 unless z >= bool 3'
    )


def test_strings_are_left_alone() -> None:
    assert every_value('label_replace(x, "d", "a>b", "s", "(.*)") > 0') == (
        'label_replace(x, "d", "a>b", "s", "(.*)") > bool 0'
    )

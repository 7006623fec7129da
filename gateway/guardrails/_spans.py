"""Rewriting text at the spans a detector found (the redact mode of the span-based detectors)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["replace_spans"]


def replace_spans(text: str, spans: Sequence[tuple[int, int]], replacement: str = "") -> str:
    """`text` with each (start, end) span, in order and not overlapping, replaced by `replacement`."""
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for s, e in spans:
        out += (text[pos:s], replacement)
        pos = e
    out.append(text[pos:])
    return "".join(out)

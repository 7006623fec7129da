import pytest
from pydantic import ValidationError

from router.config import Cascade, Difficulty, LiveCalibration


def test_live_calibration_is_on_by_default_and_can_be_turned_off() -> None:
    d = Difficulty(target_strong_share=0.3)
    assert d.calibration == LiveCalibration(window=1000, min_samples=200, gain=4.0)
    assert Difficulty.model_validate({"target_strong_share": 0.3, "calibration": None}).calibration is None
    with pytest.raises(ValidationError):
        Difficulty.model_validate({"calibration": {"window": 0}})
    with pytest.raises(ValidationError):
        Difficulty.model_validate({"calibration": {"typo": 1}})


def test_cost_budget_range() -> None:
    scorers = [{"kind": "agreement"}]
    assert Cascade.model_validate({"scorers": scorers}).cost_budget is None
    assert Cascade.model_validate({"scorers": scorers, "cost_budget": 0.4}).cost_budget == 0.4
    for bad in (0.0, 1.2):
        with pytest.raises(ValidationError):
            Cascade.model_validate({"scorers": scorers, "cost_budget": bad})

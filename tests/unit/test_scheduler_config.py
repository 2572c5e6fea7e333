"""The scheduler config's GPU budget: a reserve larger than the GPU names what does not fit."""
import pytest

from scheduler.config import load_scheduler_config


def test_budget_over_the_gpu_names_the_weights_and_the_gpu():
    cfg = load_scheduler_config("default")
    gpu = cfg.gpu_config()
    over = cfg.with_(gpu_budget_bytes=None, activation_reserve_bytes=2 * gpu.hbm_bytes)
    with pytest.raises(ValueError) as err:
        over.gpu_budget()
    text = str(err.value)
    assert f"the weights of {cfg.model_config().name!r}" in text
    assert f"GB of {gpu.name!r}" in text
    assert "''s" not in text

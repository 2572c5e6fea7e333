"""boost/config.py: the machine as data, alpha and MPP's modulus."""
import math

import pytest

from boost.config import GiB, Machine, check_alpha, load_machine, load_model, modulus_for


def test_gh200_is_the_papers_measured_machine():
    m = load_machine("gh200")
    assert m.hbm_bytes_per_s == 3330 * GiB and m.second_bytes_per_s == 350 * GiB
    assert m.alpha == pytest.approx(350 / 3330)
    assert m.page_bytes == 2 << 20
    assert m.placement_modulus == 12            # section 5.1's modulus, not alpha's
    assert m.with_(modulus=None).placement_modulus == 11


@pytest.mark.parametrize("alpha, modulus", [(0.1, 11), (0.5, 3), (1.0, 2), (350 / 3330, 11),
                                            (128 / 3350, 28), (450 / 3350, 9), (0.09, 13)])
def test_modulus_is_ceil_of_inverse_alpha_plus_one(alpha, modulus):
    assert modulus_for(alpha) == modulus
    # K = ceil(1/alpha) keeps the second tier's share at or under alpha / (1 + alpha)'s neighbour alpha
    assert 1 / modulus_for(alpha) <= alpha / (1 + alpha) + 1e-12
    assert modulus == math.ceil(round(1 / alpha, 9)) + 1


@pytest.mark.parametrize("alpha", [0, -0.1, 1.5, float("nan"), "0.1", None, True])
def test_alpha_outside_0_1_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha must be in"):
        check_alpha(alpha)


def test_bad_machines_name_the_problem():
    with pytest.raises(ValueError, match="hbm_bytes_per_s must be > 0"):
        Machine("x", 0, 1)
    with pytest.raises(ValueError, match="second_bytes_per_s must be > 0"):
        Machine("x", 1e12, 0)
    with pytest.raises(ValueError, match="alpha must be in"):
        Machine("x", 1e12, 2e12)
    with pytest.raises(ValueError, match="page_bytes must be an integer"):
        Machine("x", 1e12, 1e11, page_bytes=0)
    with pytest.raises(ValueError, match="hbm_sm_fraction must be in"):
        Machine("x", 1e12, 1e11, hbm_sm_fraction=1.5)
    with pytest.raises(ValueError, match="modulus must be null or an integer >= 2"):
        Machine("x", 1e12, 1e11, modulus=1)
    with pytest.raises(ValueError, match="unknown fields"):
        load_machine("gh200", bogus=1)


def test_models_from_boost_then_isa():
    llama = load_model("llama3.3-70b")
    assert (llama.hidden, llama.ffn, llama.kv_heads, llama.layers) == (8192, 28672, 8, 80)
    # a 16-token FP8 block over every layer and head is 2.5 MiB (section 4.5)
    assert 16 * llama.layers * llama.kv_heads * llama.head_dim * 2 == 2.5 * (1 << 20)
    assert load_model("qwen3-30b-a3b").kv_heads == 4

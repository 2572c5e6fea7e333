"""boost/pool.py and serving's tiering option: BOOST inside PLoRA's pool."""
import pytest

from boost.pool import PAM_ONLY, TIERING, tiering
from isa.system import load_gpu, load_link
from serving.config import load_serving_config
from serving.engine import run
from scheduler.gpu_model import GpuModel
from serving.tiering import load_tiering

H100 = load_gpu("h100")


@pytest.mark.parametrize("link, modulus", [("cxl3.1", 28), ("nvlink-c2c", 9)])
def test_alpha_is_link_over_hbm(link, modulus):
    t = tiering(H100, load_link(link))
    assert t.machine.alpha == pytest.approx(load_link(link).bytes_per_s / 3350e9)
    assert t.modulus == modulus and t.weight_share == t.kv_share == 1 / modulus


def test_the_gemms_read_the_pool_share_over_the_link():
    from isa.system import load_model
    m = load_model("llama2-7b")
    t = tiering(H100, load_link("nvlink-c2c"))
    plain, tiered = GpuModel(H100, m), GpuModel(H100, m, t)
    c0, c1 = plain.gemm(32, 4096, 11008), tiered.gemm(32, 4096, 11008)
    w = 4096 * 11008 * 2
    assert c1.second_bytes == pytest.approx(w / 9)
    assert c1.hbm_bytes + c1.second_bytes == pytest.approx(c0.hbm_bytes)
    assert c1.seconds == pytest.approx(t.memory_s(c0.hbm_bytes - w / 9, w / 9))
    assert c0.seconds / c1.seconds <= 1 + t.machine.alpha + 1e-12     # never past 1 + alpha


def test_a_serving_run_with_boost_gains_hbm_and_gemm_time():
    cfg = load_serving_config("default", requests=16, link="nvlink-c2c")
    a, b = run(cfg, progress=False), run(cfg.with_(tiering=TIERING), progress=False)
    pam = run(cfg.with_(tiering=PAM_ONLY), progress=False)
    sa, sb = a.summary(), b.summary()
    assert sb["layer_gemm_us"] < sa["layer_gemm_us"]
    moved = b.system.model.weight_bytes / 9
    assert b.system.scheduler.budget - a.system.scheduler.budget == pytest.approx(moved)
    assert a.system.kv_capacity_bytes() - b.system.kv_capacity_bytes() == pytest.approx(moved)
    assert pam.summary()["layer_gemm_us"] == pytest.approx(sb["layer_gemm_us"])


def test_bad_tiering_names_the_problem():
    with pytest.raises(ValueError, match="tiering must be 'module:callable'"):
        load_tiering("boost.pool", H100, load_link("cxl3.1"), None)
    with pytest.raises(ValueError, match="has no attribute"):
        load_tiering("boost.pool:nothing", H100, load_link("cxl3.1"), None)
    with pytest.raises(ValueError, match="needs a pool"):
        run(load_serving_config("default", requests=4, system="s-lora", tiering=TIERING), progress=False)

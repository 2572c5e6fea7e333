"""rtlbench/roofline.py's measurement on the cycle model: back-to-back descriptors of each
workload kind come back bit-exact, and the period it derives from the completion
interrupts respects the device's limits (no more bytes per cycle than the port carries,
no more MACs than the array has), and is the spacing of the descriptors' own cycles in
steady state."""
import pytest

import isa
from rtlbench import roofline


@pytest.mark.parametrize("config", ["default", "quad"])
def test_every_kind_within_the_device_limits(config):
    cfg = isa.load_config(config)
    works = roofline.workloads(cfg)
    picked = {}
    for w in works:                         # the first of each kind, and one large GEMV
        picked.setdefault(w.kind, w)
    chosen = list(picked.values()) + [w for w in works if w.kind == "gemv" and w.elements >= 1 << 20][:1]
    results = roofline.model_results(cfg, chosen, copies=5)
    for w, r in zip(chosen, results):
        assert r["name"] == w.name
        assert 0 < r["port"] <= 1.0, f"{w.name}: port {r['port']:.3f}"
        assert 0 < r["mac"] <= 1.0, f"{w.name}: MACs {r['mac']:.3f}"
        # a descriptor's weights alone take dev_size lines over the port
        desc = roofline._shape_descriptor(w)
        assert r["period"] >= desc.dev_size * 64 / cfg.beat_bytes


def test_period_is_the_steady_state_spacing():
    """More copies do not change the steady-state period of a short GEMV (the fill is
    outside it), and a single descriptor's completion cycles exceed it (it overlaps)."""
    cfg = isa.load_config("default")
    w = roofline.Workload("gemv", 1, 512, 64)
    few, many = (roofline.model_results(cfg, [w], copies=c)[0] for c in (5, 12))
    assert few["period"] == pytest.approx(many["period"], rel=0.02)
    assert few["first_cycles"] > few["period"]


def test_too_few_copies_is_refused(capsys):
    with pytest.raises(SystemExit):
        roofline.main(["--config", "default", "--copies", "3", "--source", "model"])
    assert "--copies must be at least 4" in capsys.readouterr().err

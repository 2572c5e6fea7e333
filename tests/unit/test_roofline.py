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


def test_attention_line_on_the_paper_config():
    """The attention line (issue 25's targets) from the model: every cell a utilization in
    (0, 100 %]; the layer's 1,024 shares run at one share's steady state (the same paged
    descriptor back to back); a share's bytes are its two pages' keys and values, its list,
    q and the header. The list is read among the previous share's runs (the front end's
    second slot, docs/read-compute-project.md), so a share's period is within a few cycles
    of the same tokens unpaged (it was 57 cycles more when the list came after the previous
    share's pages), and faster than two 128-token page descriptors."""
    import re
    cfg = isa.load_config("paper")
    works = roofline.attention_workloads(cfg) + [roofline.Workload("attention^T", 8, 128, 512)]
    results = roofline.model_results(cfg, works, copies=6)
    line = roofline.attention_summary(cfg, "model", results)
    match = re.fullmatch(r"attention config=paper source=model page128=([\d.]+)% share256=([\d.]+)% "
                         r"layer_llama2_7b=([\d.]+)% gqa8_mac=([\d.]+)%", line)
    assert match, line
    page, share, layer, gqa = (float(v) for v in match.groups())
    assert all(0 < v <= 100 for v in (page, share, layer, gqa))
    assert layer == pytest.approx(share, rel=0.02)
    share_desc = roofline._shape_descriptor(roofline.Workload("paged", 1, 128, 256, page=128))
    assert roofline.moved_bytes(cfg, share_desc) == 2 * 2 * 128 * 128 * 2 + 64 + 128 * 2 + 64
    by_name = {r["name"]: r for r in results}
    paged, unpaged = by_name["paged/128 1x128x256"]["period"], by_name["attention^T 1x128x256"]["period"]
    assert unpaged <= paged <= unpaged + 4
    assert paged < 2 * by_name["attention^T 1x128x128"]["period"]
    one = by_name["attention^T 1x128x128"]
    desc = roofline._shape_descriptor(roofline.Workload("attention^T", 1, 128, 128))
    assert one["port"] == pytest.approx(roofline.moved_bytes(cfg, desc) / one["period"] / cfg.beat_bytes)


def test_attention_line_absent_without_its_shapes():
    cfg = isa.load_config("default")
    assert roofline.attention_summary(cfg, "model", [{"name": "gemv 1x64x64", "port": 0.5, "mac": 0.5}]) is None

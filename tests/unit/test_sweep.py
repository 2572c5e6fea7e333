"""Sweeps (serving.sweep): the grid as a cartesian product with its unit conversions, the
axis check, the CSV round trip, and real Dask clusters (the local one `sweep` starts, and
one started here reached by its address) giving the in-process summaries point for point."""
import math

import pytest

from serving.config import load_serving_config
from serving.sweep import points, read_csv, run_point, sweep, write_csv

BASE = load_serving_config("default", requests=8)

# a cluster's HTTP server falls back to another port when 8787 is taken (another cluster)
pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use")


def test_points_are_the_cartesian_product_with_units():
    grid = {"link_gb_s": [64, 128], "latency_ns": [0, 200, 2000], "devices": [2, 8], "batch": [16]}
    out = points(BASE, grid)
    assert len(out) == 2 * 3 * 2 * 1
    labels = [tuple(lab.values()) for lab, _ in out]
    assert labels == [(g, ns, d, 16) for g in (64, 128) for ns in (0, 200, 2000) for d in (2, 8)]  # last axis fastest
    for lab, cfg in out:
        assert cfg.link_bytes_per_s == pytest.approx(lab["link_gb_s"] * 1e9, rel=1e-15)
        assert cfg.link_latency_s == pytest.approx(lab["latency_ns"] * 1e-9, rel=1e-15, abs=0)
        assert cfg.num_devices == lab["devices"] and isinstance(cfg.num_devices, int)
        assert cfg.max_batch == 16
        # nothing else moves
        assert cfg.with_(link_bytes_per_s=None, link_latency_s=None, num_devices=4, max_batch=32) == BASE
    one = dict(points(BASE, {"link_gb_s": [128], "latency_ns": [200]})[0][1].__dict__)
    assert one["link_bytes_per_s"] == 1.28e11 and one["link_latency_s"] == pytest.approx(2e-7, rel=1e-15)


def test_any_run_field_is_an_axis():
    out = points(BASE, {"system": ["plora", "s-lora"], "kv_precision": ["fp16", "int4"]})
    assert [(c.system, c.kv_precision) for _, c in out] == [
        ("plora", "fp16"), ("plora", "int4"), ("s-lora", "fp16"), ("s-lora", "int4")]
    assert points(BASE, {}) == [({}, BASE)]


@pytest.mark.parametrize("axis", ["bogus", "link_gbs", "latency"])
def test_unknown_axis_is_named(axis):
    with pytest.raises(ValueError, match=rf"unknown sweep axis {axis!r}"):
        points(BASE, {"link_gb_s": [128], axis: [1]})


def test_bad_axis_values_are_refused_by_the_run_config():
    with pytest.raises(ValueError, match="num_devices"):
        points(BASE, {"devices": [0]})
    with pytest.raises(ValueError, match="link_bytes_per_s"):
        points(BASE, {"link_gb_s": [-8]})


def test_csv_round_trip(tmp_path):
    rows = [dict(system="plora", link_gb_s=128.0, requests=8, tpot_ms=12.5, full_batch_tok_s=math.nan),
            dict(system="ns", link_gb_s=0.1, requests=16, tpot_ms=3e-7, full_batch_tok_s=1234.5, extra="x")]
    back = read_csv(write_csv(rows, tmp_path / "sub" / "sweep.csv"))
    assert len(back) == 2
    assert back[0]["extra"] == "" or math.isnan(back[0]["extra"])
    for want, got in zip(rows, back):
        for k, v in want.items():
            assert (math.isnan(got[k]) if isinstance(v, float) and math.isnan(v) else got[k] == v), k


def same(a, b):
    """Two summaries equal field by field (NaN equal to NaN), the wall time aside."""
    assert set(a) == set(b)
    for k in a:
        if k == "wall_s":
            continue
        if isinstance(a[k], float) and math.isnan(a[k]):
            assert isinstance(b[k], float) and math.isnan(b[k]), k
        else:
            assert a[k] == b[k], k


@pytest.fixture(scope="module")
def two_points():
    configs = [cfg for _, cfg in points(BASE, {"link_gb_s": [16, 128]})]
    return configs, [run_point(cfg) for cfg in configs]


def test_local_cluster_sweep_matches_in_process(two_points):
    configs, local = two_points
    assert local[0]["link_gb_s"] == 16 and local[1]["link_gb_s"] == 128
    assert local[0]["decode_tok_s"] < local[1]["decode_tok_s"]          # the link matters at 16 GB/s
    same_order = sweep(configs, workers=2, progress=False)
    for a, b in zip(local, same_order):
        same(a, b)


def test_sweep_on_a_cluster_given_by_address(two_points):
    from dask.distributed import LocalCluster
    configs, local = two_points
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = sweep(list(reversed(configs)), address=cluster.scheduler_address, progress=False)
        assert cluster.scheduler_address.startswith("tcp://")
        # the cluster outlives the sweep (not ours to close)
        assert cluster.status.name == "running"
    for a, b in zip(reversed(local), remote):
        same(a, b)

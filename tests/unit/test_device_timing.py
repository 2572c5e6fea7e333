"""scheduler/device_timing.py: the table of device times against direct model runs, its
grid points, its disk cache and its feasibility checks."""
import dataclasses
import json
import re

import numpy as np
import pytest

import isa
from isa.errors import ShapeError
from scheduler import device_timing
from scheduler.device_timing import DeviceTiming, cache_key, random_shape, why_infeasible


def _configs():
    return [isa.load_config("paper"), isa.load_config("default")]


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.name)
def test_random_shapes_within_2_percent(cfg, tmp_path):
    timing, rng = DeviceTiming(cfg, tmp_path), np.random.default_rng(7)
    shapes = [(op, random_shape(cfg, op, rng))
              for op in ("lora_xa", "lora_xab", "attention", "attention_share") for _ in range(5)]
    # and a few generic GEMMs of any K, N (not multiples of anything)
    shapes += [("gemm", (int(rng.integers(2, 257)), int(rng.integers(1, 1025)), int(rng.integers(1, 1025))))
               for _ in range(3)]
    for op, dims in shapes:
        table, model = timing.cycles(op, *dims), timing.measure_cycles(op, *dims)
        assert abs(table - model) <= 0.02 * model, (op, dims, table, model)
        assert getattr(timing, op)(*dims) == pytest.approx(table / cfg.clock_hz)
        assert timing.measure(op, *dims) == model / cfg.clock_hz


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.name)
def test_exact_at_grid_points(cfg, tmp_path):
    timing, direct = DeviceTiming(cfg, tmp_path), DeviceTiming(cfg, tmp_path / "direct")
    rows, lanes = cfg.rows, cfg.lanes
    points = [("lora_xa", (b, 1024, 16)) for b in (1, rows, 2 * rows, 8 * rows, rows + 1)]
    points += [("lora_xab", (b, 2048, 8)) for b in (1, 4 * rows)]
    points += [("attention", (4, 128, t)) for t in (1, 2, lanes // 2 + 1, lanes, 2 * lanes + 1, 3 * lanes)]
    points += [("attention_share", (1, 128, 32, t)) for t in (1, 32, 33, 64, lanes + 1)]
    for op, dims in points:
        assert timing.cycles(op, *dims) == direct.measure_cycles(op, *dims), (op, dims)


def test_cache_is_read_back_without_the_model(tmp_path, monkeypatch):
    cfg = isa.load_config("paper")
    first = DeviceTiming(cfg, tmp_path)
    shapes = [("lora_xa", (37, 4096, 16)), ("lora_xab", (5, 2048, 32)), ("attention", (8, 128, 700))]
    values = [first.cycles(op, *dims) for op, dims in shapes]
    assert first.model_runs > 0
    assert first.path.parent == tmp_path and first.path.exists()
    saved = json.loads(first.path.read_text())
    assert saved["key"] == first.key and saved["config"]["name"] == "paper"

    second = DeviceTiming(cfg, tmp_path)

    def no_model(*args):
        raise AssertionError("the model ran although the cache holds the points")
    monkeypatch.setattr(second, "measure_cycles", no_model)
    assert [second.cycles(op, *dims) for op, dims in shapes] == values
    assert second.model_runs == 0 and second._dev is None

    # two writers of one file: each merges its points into what the other saved
    a, b = DeviceTiming(cfg, tmp_path), DeviceTiming(cfg, tmp_path)
    a.cycles("gemm", 3, 300, 40)
    b.cycles("gemm", 3, 500, 60)
    names = json.loads(first.path.read_text())["tables"]
    assert {"gemm 300 40", "gemm 500 60", "gemm 4096 16"} <= set(names)
    assert not list(tmp_path.glob("*.tmp"))

    # the env var names the folder when no argument does
    monkeypatch.setenv(device_timing.CACHE_ENV, str(tmp_path))
    assert DeviceTiming(cfg).path == first.path


def test_cache_key_follows_config_and_model(tmp_path, monkeypatch):
    cfg = isa.load_config("paper")
    changed = dataclasses.replace(cfg, dram_read_latency=cfg.dram_read_latency + 1)
    assert cache_key(changed) != cache_key(cfg)
    assert DeviceTiming(changed, tmp_path).path != DeviceTiming(cfg, tmp_path).path
    assert cache_key(dataclasses.replace(cfg, name="other")) != cache_key(cfg)

    # a model source edited: another key
    (tmp_path / "sim").mkdir()
    source = tmp_path / "sim" / "control_unit.py"
    source.write_text("PIPE_DEPTH = 6\n")
    monkeypatch.setattr(device_timing, "ROOT", tmp_path)
    before = cache_key(cfg)
    source.write_text("PIPE_DEPTH = 7\n")
    assert cache_key(cfg) != before


def test_infeasible_shapes_name_the_limit(tmp_path):
    paper, small = isa.load_config("paper"), isa.load_config("small")
    timing = DeviceTiming(paper, tmp_path)
    cases = [
        (timing.lora_xa, (1, paper.k_max + 1, 8), "k_max"),
        (timing.gemm, (4, 64, paper.n_max + 64), "n_max"),
        (timing.attention, (1, 128, paper.n_max + 1), "n_max"),
        (timing.lora_xab, (2, paper.k_max * 2, 16), "k_max"),
    ]
    for method, dims, limit in cases:
        with pytest.raises(ShapeError, match=limit):
            method(*dims)
        assert not timing.feasible(method.__name__, *dims)
    with pytest.raises(ShapeError, match="square"):
        timing.lora_xab(4, 4096, 16, d_out=11008)
    # a paged share: its page a power of two, whole 4 KiB of keys, at most 64 pages
    with pytest.raises(ShapeError, match="not a power of two"):
        timing.attention_share(1, 128, 24, 100)
    with pytest.raises(ShapeError, match="PAGE_ALIGN|BAD_SHAPE|4096"):
        timing.attention_share(1, 64, 16, 100)
    with pytest.raises(ShapeError, match="PAGE_LIST_MAX|BAD_SHAPE"):
        timing.attention_share(1, 128, 16, 16 * 64 + 1)
    # the second product's limits: on 'small' (k_max 2048, n_max 1024) x A fits, (x A) B not
    small_timing = DeviceTiming(small, tmp_path)
    with pytest.raises(ShapeError, match=r"second product.*n_max=1024"):
        small_timing.lora_xab(3, 2048, 8)
    assert why_infeasible(small, "gemm", 3, 2048, 8) is None
    assert "n_max=1024" in why_infeasible(small, "attention", 1, 64, 1025)
    assert timing.feasible("lora_xab", 256, 8192, 128)
    assert timing.model_runs == 0 and small_timing.model_runs == 0


def test_check_prints_the_summary_line(tmp_path):
    lines = []
    errors = device_timing.check(isa.load_config("paper"), 1, 3, tmp_path, out=lines.append)
    assert len(errors) == 5 and max(errors) <= 0.02         # a shape per op, and one mixed stream
    assert lines[-2].startswith("stream     n=1 ")
    assert re.fullmatch(r"device_timing config=paper n=5 median_error=\d+\.\d+% max_error=\d+\.\d+%",
                        lines[-1])


# an attention page's time moved by the pages before it, over a stream: up to 34 cycles
# measured on 48 random streams of the shapes below (2026-12-05; 18 before the softmax's
# l went beside S V: a short page's S V now ends before the unit's l, its DRAIN waiting
# for the anchor line, which a longer page before it hides in part)
NEIGHBOUR_CYCLES = 40


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.name)
def test_streams_are_their_periods_and_last_drain(cfg, tmp_path):
    """A queue run back to back on the model takes the sum of its descriptors' periods plus
    the last one's drain (each from a run of copies of its shape alone), as a round's queue
    holds them: attention pages of one group, full and tails, within 0.5 % (tails are
    interpolated between token counts, as the latency table is) plus NEIGHBOUR_CYCLES
    (neighbours share the readout and the writer, and a page's time moves with the ones
    before it); E4 GEMMs and E3
    chains mixed, within 1 % (a change between a GEMM and a chain moves the next one by up
    to about 35 cycles either way, measured, and is not in the formula); on the paper config
    a stream of copies of one shape to the cycle (on the default config's small device the
    24th descriptor of a stream waits about 700 cycles more, measured whatever the shape).
    """
    timing, rng = DeviceTiming(cfg, tmp_path), np.random.default_rng(5)
    d = min(4096, cfg.k_max)
    rounds = ([("attention", 1, 128, 128), ("attention", 1, 128, 37), ("attention", 1, 128, 100)],
              [("lora_xa", 3, d, 16), ("lora_xa", 1, d, 64), ("lora_xab", 5, d, 8), ("lora_xab", 1, d, 32)])
    for shapes, tolerance, neighbours in zip(rounds, (0.005, 0.01), (NEIGHBOUR_CYCLES, 0)):
        for _ in range(3):
            stream = [shapes[i] for i in rng.integers(len(shapes), size=int(rng.integers(2, 12)))]
            model = timing.measure_stream_times(stream)[-1]
            formula = timing.stream_seconds(stream) * cfg.clock_hz
            assert abs(formula - model) <= tolerance * model + neighbours, (stream, formula, model)
    for shape in (("attention", 1, 128, 128), ("lora_xa", 2 * cfg.rows, 1024, 16)) if cfg.name == "paper" else ():
        period, drain = timing.stream_cycles(*shape)
        times = timing.measure_stream_times([shape] * 9)
        assert times[-1] == pytest.approx(9 * period + drain, abs=2), shape
        steady = np.diff(times)[1:]         # after the first pair, which pays the fill
        assert np.abs(steady - period).max() <= 2, (shape, steady, period)

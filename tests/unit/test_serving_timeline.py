"""A run's timeline as a Chrome/Perfetto trace (serving.trace, `plora simulate --trace`):
the JSON loads as the Trace Event Format; every step of steps.csv is on the steps track with
its time; a detailed step's layers tile it, a pool decode layer's rounds tile the layer, and
the GPU's, the link's and the devices' events lie within their layer (and round); no track
runs two things at once; each device's events add up to the busy time the rounds charged
it; only the steps asked for are detailed; the summary is the same with and without it."""
import collections
import json

import numpy as np
import pytest
from click.testing import CliRunner

from plora_cli import main
from serving.config import load_serving_config, load_system_config
from serving.engine import device_timing, simulate
from serving.trace import DEVICES, GPU, LAYERS, LINK, ROUNDS_TID, RUN, STEPS, Timeline, parse_steps
from serving.workload import Request, Workload

EPS_US = 1e-3           # events are written rounded to 1e-6 us; sums of many of them drift a little

RUN_CFG = load_serving_config("default")


def workload(n=10, seed=5):
    rng = np.random.default_rng(seed)
    ranks = (8, 16, 32, 64, 128, 16)
    return Workload("hand", ranks, tuple(Request(i, 0.0, int(rng.integers(0, len(ranks))), int(rng.integers(5, 300)),
                                                 int(rng.integers(2, 12))) for i in range(n)), "hand-built")


class Charged:
    """A second on_step callback: each device's busy time as the rounds charged it, summed
    over the steps, for the steps in `steps`."""

    def __init__(self, steps):
        self.steps, self.index, self.busy = steps, 0, collections.Counter()

    def __call__(self, system, kind, start_s, requests, tokens, cost):
        if self.steps is None or self.index in self.steps:
            for load, _ in cost.rounds:
                for j, (b, d) in enumerate(zip(load.busy, load.drain, strict=True)):
                    if b:
                        self.busy[j] += system.model.layers * (b + d)
        self.index += 1


def traced(system="plora", steps=None, **changes):
    run = RUN_CFG.with_(**changes)
    timeline, charged = Timeline(steps), Charged(steps)

    def both(*args):
        timeline(*args)
        charged(*args)
    result = simulate(run, load_system_config(system), workload(), device_timing(run.device), progress=False,
                      on_step=both)
    return result, json.loads(json.dumps(timeline.trace())), charged


@pytest.fixture(scope="module", params=["plora", "s-lora", "pure-cxl"])
def case(request):
    return (request.param, *traced(request.param, max_batch=4))


def complete(trace, pid=None, tid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (pid is None or e["pid"] == pid)
            and (tid is None or e["tid"] == tid)]


def within(inner, outer):
    return outer["ts"] - EPS_US <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS_US


def test_the_trace_is_trace_event_format(case):
    _, result, trace, _ = case
    assert set(trace) >= {"traceEvents", "displayTimeUnit", "otherData"}
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert e["dur"] > 0 and e["ts"] >= 0 and e["name"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names[(RUN, STEPS)] == "steps" and names[(LINK, 1)] == "to pool" and names[(LINK, 2)] == "to GPU"
    assert [names[(DEVICES, j + 1)] for j in range(result.run.num_devices)] == [
        f"device {j}" for j in range(result.run.num_devices)]
    other = trace["otherData"]
    summary = result.summary()
    assert {k: other[k] for k in ("system", "model", "gpu", "link", "device", "num_devices")} == {
        k: summary[k] for k in ("system", "model", "gpu", "link", "device", "num_devices")}


def test_every_step_is_on_the_steps_track_with_its_time(case):
    _, result, trace, _ = case
    steps = complete(trace, RUN, STEPS)
    cols = result.log.columns
    assert len(steps) == len(cols["kind"])
    for e, kind, end, sec in zip(steps, cols["kind"], cols["t_s"], cols["step_s"], strict=True):
        assert e["args"]["kind"] == kind
        assert e["dur"] == pytest.approx(sec * 1e6, abs=EPS_US)
        assert e["ts"] + e["dur"] == pytest.approx(end * 1e6, abs=EPS_US)


def test_layers_tile_their_step_and_events_nest_in_their_layer(case):
    system, result, trace, _ = case
    layers = result.system.model.layers
    steps = complete(trace, RUN, STEPS)
    layer_events = complete(trace, RUN, LAYERS)
    assert len(layer_events) == len(steps) * (layers + 1)       # every step detailed, then its LM head
    by_step = collections.defaultdict(list)
    for e in layer_events:
        by_step[next(i for i, s in enumerate(steps) if within(e, s))].append(e)
    for i, step in enumerate(steps):
        mine = sorted(by_step[i], key=lambda e: e["ts"])
        assert len(mine) == layers + 1 and mine[-1]["name"] == "LM head"
        assert sum(e["dur"] for e in mine) == pytest.approx(step["dur"], abs=EPS_US)
        for a, b in zip(mine, mine[1:], strict=False):
            assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=EPS_US)
    # every GPU, link and device event lies within one layer (or the LM head)
    for pid in (GPU, LINK, DEVICES):
        for e in complete(trace, pid):
            assert any(within(e, layer) for layer in layer_events), (system, e)


def test_rounds_tile_a_pool_decode_layer_and_hold_their_events(case):
    system, result, trace, _ = case
    rounds = complete(trace, RUN, ROUNDS_TID)
    decodes = sum(k == "decode" for k in result.log.columns["kind"])
    if system == "s-lora":
        assert not rounds
        return
    assert len(rounds) == decodes * result.system.model.layers * 5
    layers = {(e["args"]["step"], e["args"]["layer"]): e for e in complete(trace, RUN, LAYERS) if "layer" in e["args"]}
    per_layer = collections.defaultdict(list)
    for r in rounds:
        per_layer[(r["args"]["step"], r["args"]["layer"])].append(r)
    for key, mine in per_layer.items():
        assert [r["name"] for r in mine] == ["qkv", "attention", "o", "gate_up", "down"]
        assert sum(r["dur"] for r in mine) == pytest.approx(layers[key]["dur"], abs=EPS_US)
        assert all(within(r, layers[key]) for r in mine)
    for e in complete(trace, DEVICES):
        assert any(within(e, r) and r["name"] == e["name"] for r in rounds), e


def test_no_track_runs_two_things_at_once(case):
    _, _, trace, _ = case
    tracks = collections.defaultdict(list)
    for e in complete(trace):
        tracks[(e["pid"], e["tid"])].append(e)
    for key, events in tracks.items():
        events.sort(key=lambda e: e["ts"])
        for a, b in zip(events, events[1:], strict=False):
            assert b["ts"] >= a["ts"] + a["dur"] - EPS_US, (key, a, b)


def test_each_device_track_sums_to_its_charged_busy_time(case):
    system, result, trace, charged = case
    busy = collections.Counter()
    for e in complete(trace, DEVICES):
        busy[e["tid"] - 1] += e["dur"]
    if system != "plora":           # S-LoRA has no pool; Pure CXL's devices are memory, E1/E2 only
        assert not busy and not +charged.busy
        return
    assert sum(busy.values()) > 0 and set(busy) <= set(range(result.run.num_devices))
    for j in range(result.run.num_devices):
        assert busy[j] == pytest.approx(charged.busy[j] * 1e6, rel=1e-9, abs=EPS_US * 100)
        assert trace["otherData"]["device_busy_us"][j] == pytest.approx(charged.busy[j] * 1e6, rel=1e-12)
    # a device is busy no longer than the rounds it works in
    assert max(busy.values()) <= sum(e["dur"] for e in complete(trace, RUN, ROUNDS_TID))


def test_only_the_steps_asked_for_are_detailed():
    result, trace, charged = traced("plora", steps=range(2, 4), max_batch=4)
    details = {e["args"]["step"] for e in complete(trace, RUN, LAYERS)}
    assert details == {2, 3}
    assert len(complete(trace, RUN, STEPS)) == len(result.log)
    busy = sum(e["dur"] for e in complete(trace, DEVICES))
    assert busy == pytest.approx(sum(charged.busy.values()) * 1e6, rel=1e-9)


@pytest.mark.parametrize("text, steps", [("all", None), ("7", range(0, 7)), ("3:9", range(3, 9)), (":4", range(0, 4))])
def test_parse_steps(text, steps):
    assert parse_steps(text) == steps


@pytest.mark.parametrize("text", ["x", "5:2", "-1:3", "1:2:3"])
def test_parse_steps_refuses(text):
    with pytest.raises(ValueError):
        parse_steps(text)


def test_simulate_trace_writes_it_and_changes_no_summary_line(tmp_path):
    args = ["simulate", "--set", "requests=6", "--set", "max_batch=3"]
    plain = CliRunner().invoke(main, args, catch_exceptions=False)
    path = tmp_path / "sub" / "trace.json"
    with_trace = CliRunner().invoke(main, args + ["--trace", str(path), "--trace-steps", "0:3"],
                                    catch_exceptions=False)
    assert plain.exit_code == 0 and with_trace.exit_code == 0
    def lines(output):              # a progress bar (on a slow machine) ends in "\r", its line cleared
        return [ln.rsplit("\r", 1)[-1] for ln in output.splitlines()]
    wrote = [ln for ln in lines(with_trace.output) if ln.startswith("wrote")]
    assert len(wrote) == 1 and wrote[0].startswith(f"wrote {path} (Chrome/Perfetto trace:")
    assert "steps 0:3 by layer" in wrote[0]

    def summary(output):
        return [ln for ln in lines(output) if ln.strip() and not ln.startswith(("wall_s", "wrote"))]
    assert summary(with_trace.output) == summary(plain.output)
    trace = json.loads(path.read_text())
    assert {e["args"]["step"] for e in complete(trace, RUN, LAYERS)} == {0, 1, 2}


def test_simulate_refuses_bad_trace_steps_in_one_line():
    result = CliRunner().invoke(main, ["simulate", "--trace", "x.json", "--trace-steps", "9:1"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("Error:") and "--trace-steps" in result.output


def test_simulate_refuses_a_trace_path_it_cannot_make_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["simulate", "--trace", str(blocker / "sub" / "t.json")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("Error:") and "--trace" in result.output

"""The serving loop (serving.engine) against conservation laws: every request served once
with all its tokens, the batch and prefill limits, occupancy rebuilt from the per-request
times matching every step's row, arrival before admission, the clock as the sum of the
steps (plus idle gaps only when nothing runs), and the memory boundary of admission."""
import math

import numpy as np
import pytest

from isa.system import load_model
from serving.config import SystemConfig, load_serving_config, load_system_config
from serving.engine import ServingError, device_timing, load_workload, simulate
from serving.workload import Request, Workload

RANKS = (8, 16, 32, 64, 128)
RUN = load_serving_config("default")


def hand_workload(specs, ranks=RANKS, name="hand"):
    """specs: (arrival_s, adapter, prompt, output) in arrival order."""
    return Workload(name, tuple(ranks), tuple(Request(i, *s) for i, s in enumerate(specs)), "hand-built")


def mixed_workload(n=14, seed=3, arrivals=None):
    """Short requests over a few adapters, some with a single output token."""
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(n):
        output = 1 if i % 5 == 2 else int(rng.integers(2, 30))
        specs.append((0.0 if arrivals is None else arrivals[i], int(rng.integers(0, 6)), int(rng.integers(5, 300)),
                      output))
    return hand_workload(specs, ranks=(8, 16, 32, 64, 128, 16))


def sim(workload, system="plora", **changes):
    run = RUN.with_(**changes)
    return simulate(run, load_system_config(system), workload, device_timing(run.device), progress=False)


def rows(result):
    cols = result.log.columns
    return [dict(zip(cols, values)) for values in zip(*cols.values())]


def served(result):
    """rid -> (Live, finish time)."""
    return {live.rid: (live, t) for live, t in result.done}


CASES = [("plora", dict()), ("plora", dict(max_batch=3, max_prefill_tokens=400)),
         ("s-lora", dict(max_batch=4)), ("pure-cxl", dict(max_batch=5, max_prefill_tokens=300))]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{'-'.join(f'{k}{v}' for k, v in c[1].items())}")
def case(request):
    system, changes = request.param
    workload = mixed_workload()
    return workload, RUN.with_(**changes), sim(workload, system, **changes)


def test_every_request_finishes_exactly_once_with_all_its_tokens(case):
    workload, _, result = case
    rids = [live.rid for live, _ in result.done]
    assert sorted(rids) == [r.rid for r in workload.requests]
    by_rid = {r.rid: r for r in workload.requests}
    for live, finish in result.done:
        r = by_rid[live.rid]
        assert (live.adapter, live.prompt, live.output, live.generated) == (
            r.adapter, r.prompt_tokens, r.output_tokens, r.output_tokens)
        assert r.arrival_s < live.first_token_s <= finish
        assert (finish == live.first_token_s) == (r.output_tokens == 1)
    # tokens: one per request a prefill admits, one per running request a decode step
    assert sum(row["requests_count"] for row in rows(result)) == sum(r.output_tokens for r in workload.requests)
    s = result.summary()
    assert s["requests"] == len(workload.requests) and s["steps"] == len(rows(result))


def test_each_step_row_is_the_batch_rebuilt_from_request_times(case):
    """A request runs from its first token (its prefill's end) to its finish: a decode step
    ending at t serves exactly the requests with first < t <= finish, a prefill ending at t
    admits those whose first token is t (its tokens: their prompts); each request is in
    output - 1 decode steps."""
    workload, run, result = case
    done = served(result)
    decode_steps = {rid: 0 for rid in done}
    for row in rows(result):
        t = row["t_s"]
        if row["kind"] == "decode":
            batch = [rid for rid, (live, f) in done.items() if live.first_token_s < t <= f]
            assert row["requests_count"] == row["tokens_count"] == len(batch)
            assert 1 <= row["requests_count"] <= run.max_batch
            for rid in batch:
                decode_steps[rid] += 1
        else:
            assert row["kind"] == "prefill"
            new = [live for live, _ in done.values() if live.first_token_s == t]
            running = [rid for rid, (live, f) in done.items() if live.first_token_s < t < f]
            assert row["requests_count"] == len(new) >= 1
            assert row["tokens_count"] == sum(live.prompt for live in new)
            assert len(running) + len(new) <= run.max_batch
            assert row["tokens_count"] <= run.max_prefill_tokens or len(new) == 1
    assert all(decode_steps[rid] == live.output - 1 for rid, (live, _) in done.items())


def test_offline_clock_is_the_sum_of_the_steps(case):
    _, _, result = case
    seconds = [row["step_s"] for row in rows(result)]
    assert all(s > 0 for s in seconds)
    assert result.summary()["sim_s"] == pytest.approx(math.fsum(seconds), rel=1e-12)
    t = [row["t_s"] for row in rows(result)]
    assert t == sorted(t)


def test_admission_is_first_come_first_served(case):
    workload, _, result = case
    first = [served(result)[r.rid][0].first_token_s for r in workload.requests]
    assert first == sorted(first)


@pytest.fixture(scope="module")
def poisson():
    workload = load_workload("poisson", 16, None, None)
    return workload, sim(workload, "plora", max_batch=4)


def test_poisson_requests_are_not_admitted_before_they_arrive(poisson, tmp_path):
    workload, result = poisson
    path = result.write_requests_csv(tmp_path / "requests.csv")
    prefill = {row["t_s"]: row["step_s"] for row in rows(result) if row["kind"] == "prefill"}
    import csv
    with path.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 16
    arrivals = {r.rid: r.arrival_s for r in workload.requests}
    assert len(set(arrivals.values())) == 16 and min(arrivals.values()) > 0
    for rec in table:
        first, arrival = float(rec["first_token_s"]), float(rec["arrival_s"])
        assert arrival == arrivals[int(rec["rid"])]
        # the prefill that gave its first token started no earlier than its arrival
        assert first - arrival >= prefill[first] * (1 - 1e-12)
        assert float(rec["ttft_s"]) == pytest.approx(first - arrival, rel=1e-12, abs=1e-15)


def test_poisson_clock_idles_only_when_nothing_runs(poisson):
    workload, result = poisson
    done = served(result)
    arrivals = sorted(r.arrival_s for r in workload.requests)
    steps = rows(result)
    prev = 0.0
    idle = 0.0
    for row in steps:
        start = row["t_s"] - row["step_s"]
        gap = start - prev
        assert gap >= -1e-12 * max(1.0, prev)
        if gap > 1e-12 * max(1.0, prev):
            # nothing ran across the gap, and it ended with an arrival, admitted at once
            assert not [rid for rid, (live, f) in done.items() if live.first_token_s <= prev < f]
            assert row["kind"] == "prefill"
            assert min(arrivals, key=lambda a: abs(a - start)) == pytest.approx(start, rel=1e-12)
            idle += gap
        prev = row["t_s"]
    assert idle > 0      # 16 requests at 20 per second: the GPU waits for some of them
    assert steps[0]["t_s"] - steps[0]["step_s"] == pytest.approx(arrivals[0], rel=1e-12)
    assert result.summary()["sim_s"] == pytest.approx(math.fsum(r["step_s"] for r in steps) + idle, rel=1e-9)


def test_same_inputs_same_run():
    workload = mixed_workload(n=8, seed=9)
    a, b = sim(workload, "plora", max_batch=3), sim(workload, "plora", max_batch=3)
    assert a.log.columns == b.log.columns


# ---- memory -----------------------------------------------------------------------------

def adapter_bytes(model, rank):
    """Every layer's A and B of one adapter over Q, K, V, O and the FFN's gate, up, down."""
    m = model
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    dims = ((m.hidden, q), (m.hidden, kv), (m.hidden, kv), (q, m.hidden),
            (m.hidden, m.ffn), (m.hidden, m.ffn), (m.ffn, m.hidden))
    return m.layers * sum(rank * (d_in + d_out) * 2 for d_in, d_out in dims)


def test_admission_holds_the_whole_context_to_the_byte():
    """A pool holding the adapters and exactly 1000 tokens of KV: a 1000-token context is
    served, a 1001-token one raises ServingError naming the request; two 500-token ones
    run together, a third waits for them."""
    m = load_model(RUN.model)
    kv_token = 2 * m.layers * m.kv_heads * m.head_dim * 2
    ranks = (8, 64)
    pool = sum(adapter_bytes(m, r) for r in ranks) + 1000 * kv_token
    system = SystemConfig(name="small-pool", pool_bytes=float(pool))
    run = RUN.with_(max_batch=8)
    timing = device_timing(run.device)

    ok = simulate(run, system, hand_workload([(0.0, 0, 990, 10)], ranks), timing, progress=False)
    assert len(ok.done) == 1

    wl = hand_workload([(0.0, 0, 500, 3), (0.0, 1, 497, 3), (0.0, 1, 991, 10)], ranks)
    with pytest.raises(ServingError, match=r"request 2\b"):
        simulate(run, system, wl, timing, progress=False)

    three = simulate(run, system, hand_workload([(0.0, 0, 490, 10), (0.0, 1, 490, 10), (0.0, 0, 10, 10)], ranks),
                     timing, progress=False)
    first = {live.rid: live.first_token_s for live, _ in three.done}
    finish = {live.rid: t for live, t in three.done}
    assert first[0] == first[1] < first[2]
    assert first[2] > max(finish[0], finish[1]) - 1e-15


@pytest.mark.parametrize("system", ["plora", "s-lora"])
def test_a_request_larger_than_memory_names_itself(system):
    wl = hand_workload([(0.0, 0, 100, 5), (0.0, 1, 100, 5), (0.0, 2, 5_000_000, 5), (0.0, 3, 100, 5)])
    with pytest.raises(ServingError, match=r"request 2: a 5000005-token context"):
        sim(wl, system)


# ---- results: the summary recomputed from the CSVs --------------------------------------

def read_csv(path):
    import csv
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default), by hand."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A run with staggered arrivals, single-token requests and full batches, as CSVs."""
    arrivals = [0.0] * 6 + [0.05 * i for i in range(1, 9)]
    workload = mixed_workload(n=14, seed=5, arrivals=arrivals)
    result = sim(workload, "plora", max_batch=4)
    out = tmp_path_factory.mktemp("results")
    return (result, read_csv(result.write_steps_csv(out / "steps.csv")),
            read_csv(result.write_requests_csv(out / "requests.csv")))


def test_csvs_hold_the_run_exactly(written):
    result, steps, requests = written
    assert len(steps) == len(result.log)
    for column, values in result.log.columns.items():
        got = [row[column] for row in steps]
        assert got == [v if isinstance(v, str) else repr(v) if isinstance(v, float) else str(v) for v in values]
    assert [int(r["rid"]) for r in requests] == list(range(14))
    ranks = result.workload.ranks
    for rec in requests:
        assert int(rec["rank"]) == ranks[int(rec["adapter"])]


def test_summary_recomputed_from_the_csvs(written):
    result, steps, requests = written
    s = result.summary()
    run = result.run
    decode = [r for r in steps if r["kind"] == "decode"]
    sec = [float(r["step_s"]) for r in decode]
    n = [int(r["requests_count"]) for r in decode]
    assert (s["steps"], s["decode_steps"], s["requests"]) == (len(steps), len(decode), len(requests))
    assert s["sim_s"] == float(steps[-1]["t_s"])
    assert s["decode_tok_s"] == pytest.approx(sum(n) / math.fsum(sec), rel=1e-12)
    full = [(k, x) for k, x in zip(n, sec) if k == run.max_batch]
    assert full, "the run should reach a full batch"
    assert s["full_batch_tok_s"] == pytest.approx(sum(k for k, _ in full) / math.fsum(x for _, x in full), rel=1e-12)
    assert s["full_batch_step_ms"] == pytest.approx(1e3 * math.fsum(x for _, x in full) / len(full), rel=1e-12)

    first = {int(r["rid"]): float(r["first_token_s"]) for r in requests}
    finish = {int(r["rid"]): float(r["finish_s"]) for r in requests}
    arrival = {int(r["rid"]): float(r["arrival_s"]) for r in requests}
    output = {int(r["rid"]): int(r["output_tokens"]) for r in requests}
    tpot = {}
    for rec in requests:
        rid = int(rec["rid"])
        if output[rid] == 1:
            assert rec["tpot_s"] == ""
        else:
            tpot[rid] = (finish[rid] - first[rid]) / (output[rid] - 1)
            assert float(rec["tpot_s"]) == pytest.approx(tpot[rid], rel=1e-12)
    assert len(tpot) < len(requests)        # single-token requests have no TPOT
    ttft = [first[r] - arrival[r] for r in first]
    assert s["tpot_ms"] == pytest.approx(1e3 * math.fsum(tpot.values()) / len(tpot), rel=1e-12)
    assert s["tpot_p50_ms"] == pytest.approx(1e3 * percentile(tpot.values(), 50), rel=1e-12)
    assert s["tpot_p99_ms"] == pytest.approx(1e3 * percentile(tpot.values(), 99), rel=1e-12)
    assert s["ttft_s"] == pytest.approx(math.fsum(ttft) / len(ttft), rel=1e-12)
    assert s["ttft_p99_s"] == pytest.approx(percentile(ttft, 99), rel=1e-12)
    makespan = max(finish.values()) - min(arrival.values())
    assert s["throughput_tok_s"] == pytest.approx(sum(output.values()) / makespan, rel=1e-12)

    bw = s["link_gb_s"] * 1e9
    busier = math.fsum(max(float(r["link_to_device_bytes"]), float(r["link_to_gpu_bytes"])) for r in decode)
    assert s["link_util"] == pytest.approx(busier / (bw * math.fsum(sec)), rel=1e-12)
    assert 0 < s["link_util"] < 1
    kv = math.fsum(float(r["kv_bytes"]) for r in decode)
    assert s["kv_dup_frac"] == pytest.approx(math.fsum(float(r["kv_gpu_bytes"]) for r in decode) / kv, rel=1e-12)
    sites = {k: sum(int(r[f"{k}_count"]) for r in decode) for k in ("E1", "E2", "E3", "E4")}
    for k, v in sites.items():
        assert s[f"share_{k}"] == pytest.approx(v / sum(sites.values()), rel=1e-12)
    assert sum(s[f"share_{k}"] for k in sites) == pytest.approx(1.0, rel=1e-12)
    layers = load_model(run.model).layers
    for col, key in (("gemm_s", "layer_gemm_us"), ("lora_s", "layer_lora_us"), ("attention_s", "layer_attention_us"),
                     ("launch_s", "layer_launch_us")):
        mean = math.fsum(float(r[col]) for r in decode) / len(decode)
        assert s[key] == pytest.approx(mean / layers * 1e6, rel=1e-12, abs=1e-12)


def test_summary_of_a_run_that_never_fills_the_batch():
    s = sim(hand_workload([(0.0, 0, 50, 4), (0.0, 1, 60, 1)]), "plora", max_batch=8).summary()
    assert math.isnan(s["full_batch_tok_s"]) and math.isnan(s["full_batch_step_ms"])
    assert s["decode_steps"] == 3 and s["requests"] == 2

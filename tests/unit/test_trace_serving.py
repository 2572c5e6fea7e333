"""Traces through a serving run (serving.engine, serving.results, `plora simulate`): requests
over the model's context refused with their count, or clipped or dropped when the run says
so; the run's requests, seed and popularity applied to a trace; adapter ids as labels in a
run; more adapters than a pool holds refused naming both byte counts; every NaN in the
summary explained. Expected values come from the sample files and the model configs."""
import csv
import json
import math
import pathlib
import time

import pytest
from click.testing import CliRunner

from isa import load_config as load_device_config
from isa.system import load_model
from plora_cli import main
from serving.config import SystemConfig, load_serving_config, load_system_config
from serving.engine import ServingError, device_timing, run, simulate
from serving.workload import Request, Workload

DATA = pathlib.Path(__file__).parents[1] / "data" / "traces"
AZURE_2023 = DATA / "azure_2023_sample.csv"
LABELS = DATA / "labels_sample.csv"
RUN = load_serving_config("default")


def azure_rows(path):
    """(rid, prompt, output) of the file's rows in arrival order (the 2023 sample is in time
    order, with one tie kept in file order)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    stamps = [r["TIMESTAMP"] for r in rows]
    assert stamps == sorted(stamps)
    return [(i, int(r["ContextTokens"]), int(r["GeneratedTokens"])) for i, r in enumerate(rows)]


def unfit(rows, limit):
    return [(rid, p, o) for rid, p, o in rows if p < 1 or o < 1 or p + o > limit]


def trace_run(path=AZURE_2023, **changes):
    return run(RUN.with_(trace=str(path), **changes), progress=False)


# ---- the model's context ----------------------------------------------------------------

@pytest.mark.parametrize("model", ["llama2-7b", "llama3-8b"])
def test_over_context_is_refused_with_the_count(model):
    limit = load_model(model).max_context
    rows = azure_rows(AZURE_2023)
    bad = unfit(rows, limit)
    assert bad          # the sample has a request without output, and 2 over 4096
    with pytest.raises(ServingError) as e:
        trace_run(model=model)
    text = str(e.value)
    assert text.startswith(f"{len(bad)} of {len(rows)} requests of 'azure_2023_sample' do not fit "
                           f"{model}'s {limit}-token context")
    for rid, p, o in bad:
        assert f"request {rid}: a {p + o}-token context ({p} + {o})" in text
    assert "context_overflow=clip" in text and "context_overflow=drop" in text


def test_clip_shortens_the_output_first_then_the_prompt():
    limit = load_model(RUN.model).max_context
    rows = azure_rows(AZURE_2023)
    result = trace_run(context_overflow="clip")
    served = {live.rid: live for live, _ in result.done}
    assert sorted(served) == [rid for rid, _, _ in rows]
    for rid, p, o in rows:
        live = served[rid]
        if (rid, p, o) not in unfit(rows, limit):
            assert (live.prompt, live.output) == (p, o)
        elif p < limit:                             # the output alone is cut (or an empty one made 1)
            assert (live.prompt, live.output) == (p, max(1, min(o, limit - p)))
        else:                                       # the prompt alone is over: 1 output token, the rest prompt
            assert (live.prompt, live.output) == (limit - 1, 1)
        assert live.prompt + live.output <= limit
    s = result.summary()
    assert (s["requests"], s["requests_clipped"], s["requests_dropped"]) == (len(rows), len(unfit(rows, limit)), 0)


def test_drop_serves_the_rest_and_counts_them():
    limit = load_model(RUN.model).max_context
    rows = azure_rows(AZURE_2023)
    bad = {rid for rid, _, _ in unfit(rows, limit)}
    result = trace_run(context_overflow="drop")
    assert {live.rid for live, _ in result.done} == {rid for rid, _, _ in rows} - bad
    s = result.summary()
    assert (s["requests"], s["requests_clipped"], s["requests_dropped"]) == (len(rows) - len(bad), 0, len(bad))


def test_drop_refuses_a_run_left_empty():
    wl = Workload("long", (8,), (Request(0, 0.0, 0, 4000, 500),), "hand-built")
    with pytest.raises(ServingError, match="left none of the 1 requests of 'long'"):
        simulate(RUN.with_(context_overflow="drop"), load_system_config("plora"), wl, progress=False)


def test_bad_context_overflow_is_named():
    with pytest.raises(ValueError, match="context_overflow must be one of"):
        RUN.with_(context_overflow="truncate")


# ---- the run's requests, seed and popularity on a trace ---------------------------------

def test_requests_seed_and_popularity_reach_the_trace():
    rows = azure_rows(AZURE_2023)
    changes = dict(requests=5, popularity="zipf", zipf_alpha=2.0, adapters=10, context_overflow="clip")
    a, b, c = (trace_run(seed=seed, **changes).workload for seed in (3, 3, 4))
    assert [r.prompt_tokens for r in a.requests] == [p for _, p, _ in rows[:5]]     # all under 4096
    assert len(a.ranks) == 10 and "zipf (alpha 2)" in a.source and "seed 3" in a.source
    assert a == b
    assert ([r.adapter for r in a.requests], a.ranks) != ([r.adapter for r in c.requests], c.ranks)
    skewed = trace_run(popularity="skewed", hot_adapters=2, hot_share=0.6, adapters=10, context_overflow="clip")
    adapters = [r.adapter for r in skewed.workload.requests]
    assert sum(a < 2 for a in adapters) == round(0.6 * len(rows))


def test_a_trace_needs_all_its_rows_to_exist():
    with pytest.raises(ValueError, match=r"requests=13, but the trace has 12"):
        trace_run(requests=13)


# ---- adapter ids as labels --------------------------------------------------------------

@pytest.mark.parametrize("system", ["plora", "s-lora"])
def test_huge_adapter_ids_run_in_seconds_and_are_reported(system, tmp_path):
    start = time.perf_counter()
    result = trace_run(LABELS, system=system)
    assert time.perf_counter() - start < 30
    assert len(result.system.ranks) == 4            # the four ids the file names, not 10**9 + 1
    with LABELS.open(newline="") as f:
        file_rows = list(csv.DictReader(f))
    written = result.write_requests_csv(tmp_path / "requests.csv")
    with written.open(newline="") as f:
        for rec in csv.DictReader(f):
            row = file_rows[int(rec["rid"])]        # the sample is in arrival order
            assert (rec["adapter"], rec["rank"]) == (row["adapter"], row["rank"])


# ---- more adapters than the pool holds --------------------------------------------------

def adapter_bytes(model, rank):
    """Every layer's A and B of one adapter over Q, K, V, O and the FFN's gate, up, down."""
    m = model
    q, kv = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    dims = ((m.hidden, q), (m.hidden, kv), (m.hidden, kv), (q, m.hidden),
            (m.hidden, m.ffn), (m.hidden, m.ffn), (m.ffn, m.hidden))
    return m.layers * sum(rank * (d_in + d_out) * 2 for d_in, d_out in dims)


def test_adapters_over_the_pool_are_refused_naming_both_byte_counts():
    m = load_model(RUN.model)
    ranks = (128, 128)
    need = sum(adapter_bytes(m, r) for r in ranks)
    pool = 1_000_000_000
    assert need > pool
    wl = Workload("two", ranks, (Request(0, 0.0, 0, 10, 2),), "hand-built")
    with pytest.raises(ServingError) as e:
        simulate(RUN, SystemConfig(name="small-pool", pool_bytes=float(pool)), wl, progress=False)
    assert f"2 adapters of 'two' need {need / 1e9:.1f} GB ({need} bytes)" in str(e.value)
    assert f"the pool of system 'small-pool' holds 1.0 GB ({pool} bytes)" in str(e.value)


def test_twenty_thousand_adapters_fill_the_default_pool_but_not_host_dram():
    changes = dict(adapters=20_000, requests=4, context_overflow="clip")
    with pytest.raises(ServingError) as e:
        trace_run(**changes)
    workload = trace_run(system="s-lora", **changes).workload       # S-LoRA keeps adapters in host DRAM
    need = sum(adapter_bytes(load_model(RUN.model), r) for r in workload.ranks)
    pool = RUN.num_devices * load_device_config(RUN.device).dram_bytes
    assert need > pool
    assert f"({need} bytes)" in str(e.value) and f"({pool} bytes)" in str(e.value)


# ---- the summary: a number or an explained absence --------------------------------------

def hand(specs, ranks=(8, 16, 32)):
    return Workload("hand", ranks, tuple(Request(i, *s) for i, s in enumerate(specs)), "hand-built")


def test_a_batch_never_full_is_explained():
    result = simulate(RUN.with_(max_batch=8), load_system_config("plora"),
                      hand([(0.0, 0, 50, 6), (0.0, 1, 60, 4), (0.0, 2, 70, 1)]), device_timing(RUN.device),
                      progress=False)
    s = result.summary()
    largest = max(n for kind, n in zip(result.log.columns["kind"], result.log.columns["requests_count"]) if kind == "decode")
    why = f"no decode step ran at max_batch=8: the largest batch was {largest}"
    assert largest == 2
    assert s["absent"] == {"full_batch_tok_s": why, "full_batch_step_ms": why}
    assert all(not (isinstance(v, float) and math.isnan(v)) for k, v in s.items() if k not in s["absent"])


def test_a_run_without_decode_steps_explains_each_nan():
    s = simulate(RUN, load_system_config("plora"), hand([(0.0, 0, 50, 1), (0.0, 1, 60, 1)]),
                 device_timing(RUN.device), progress=False).summary()
    nan = {k for k, v in s.items() if isinstance(v, float) and math.isnan(v)}
    assert nan == set(s["absent"]) and {"decode_tok_s", "tpot_ms", "link_util", "full_batch_step_ms"} <= nan
    assert s["absent"]["decode_tok_s"].startswith("no decode step ran")
    assert s["absent"]["tpot_ms"] == "no request has a second output token to time"


def test_simulate_prints_and_writes_the_reasons(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["simulate", "--set", f"trace={AZURE_2023}", "--set", "context_overflow=clip",
                                       "--set", "max_batch=16", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output

    def strict(text):
        raise ValueError(f"summary.json holds {text}, which is not JSON")
    summary = json.loads((out / "summary.json").read_text(), parse_constant=strict)
    # the summary from stdout (progress goes to stderr, which click's `output` mixes in)
    printed = dict(line.split(None, 1) for line in result.stdout.splitlines() if not line.startswith("wrote "))
    assert summary["absent"] and set(printed) == set(summary)
    assert summary["requests_clipped"] == len(unfit(azure_rows(AZURE_2023), 4096))
    for key, value in summary.items():
        if key in summary["absent"]:
            assert value is None and printed[key] == f"NaN ({summary['absent'][key]})"
        elif isinstance(value, (int, float)):
            assert float(printed[key]) == pytest.approx(value, rel=1e-5)
    assert printed["absent"] == ", ".join(summary["absent"])


def test_simulate_refusal_is_a_clean_error():
    result = CliRunner().invoke(main, ["simulate", "--set", f"trace={AZURE_2023}"])
    rows = azure_rows(AZURE_2023)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"{len(unfit(rows, 4096))} of {len(rows)} requests" in result.output

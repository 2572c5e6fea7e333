"""What a run reports (serving.results): the percentile helper against statistics.quantiles
and hand-computed values; TTFT, TPOT and end-to-end latency (mean, p50, p90, p99),
requests/s and tokens/s on a closed workload whose latencies follow from its step times by
hand, and on a staggered one against the requests' own times; the GPU, link, model and
device named in the summary and its printed lines; a unit in every CSV header the serving
package writes (steps.csv, requests.csv, a sweep's and reproduce's CSVs), the sweep CSV read
back under the summary's keys; and docs/serving.md listing every field and column."""
import csv
import math
import pathlib
import random
import shutil
import statistics

import pytest
from click.testing import CliRunner

from serving.config import load_serving_config, load_system_config
from serving.engine import device_timing, simulate
from serving.results import CSV_NAMES, STEP_COLUMNS, csv_column, percentile, summary_key, summary_lines
from serving.sweep import AXES, read_csv, write_csv
from serving.workload import Request, Workload

RUN = load_serving_config("default")
ROOT = pathlib.Path(__file__).resolve().parents[2]

# the units a column name may end in (`_gb_s`, `_tok_s`, `_req_s` end in `_s`), and the
# columns that are a name, an id or text, written out here rather than taken from the module
UNITS = ("_s", "_ms", "_us", "_ns", "_bytes", "_frac", "_count", "_tokens")
LABELS = {"kind", "rid", "adapter", "rank", "system", "workload", "workload_source", "model", "gpu", "link",
          "device", "kv_precision", "absent", "replica"}


def hand(specs, ranks=(8, 16, 32, 64)):
    """specs: (arrival_s, adapter, prompt, output) in arrival order."""
    return Workload("hand", tuple(ranks), tuple(Request(i, *s) for i, s in enumerate(specs)), "hand-built")


def sim(workload, system="plora", run=RUN, **changes):
    run = run.with_(**changes)
    return simulate(run, load_system_config(system), workload, device_timing(run.device), progress=False)


def read(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def has_unit(column):
    name = column[len("axis_"):] if column.startswith("axis_") else column
    return name in LABELS or name.endswith(UNITS)


# ---- the percentile helper ---------------------------------------------------------------

def test_percentile_by_hand():
    xs = [4.0, 1.0, 3.0, 2.0]                          # sorted 1, 2, 3, 4; position (n - 1) q / 100
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile(xs, 50) == pytest.approx(2.5, rel=1e-15)     # position 1.5
    assert percentile(xs, 90) == pytest.approx(3.7, rel=1e-15)     # position 2.7
    assert percentile(xs, 99) == pytest.approx(3.97, rel=1e-15)    # position 2.97
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_percentile_is_statistics_inclusive_quantiles():
    rng = random.Random(27)
    for n in (2, 3, 5, 10, 37, 101):
        xs = [rng.lognormvariate(0, 1) for _ in range(n)]
        cuts = statistics.quantiles(xs, n=100, method="inclusive")     # cuts[k - 1]: the k-th percentile
        for k in range(1, 100):
            assert percentile(xs, k) == pytest.approx(cuts[k - 1], rel=1e-12), (n, k)


# ---- the latencies, the rates -------------------------------------------------------------

def test_a_closed_batch_by_hand():
    """Four equal requests at t = 0, batch 4: one prefill (every first token at its end), then
    four decode steps that finish them together. TTFT is the prefill's time for each, the
    end-to-end latency the whole run, TPOT the mean decode step; every percentile equals the mean."""
    result = sim(hand([(0.0, a, 50, 5) for a in range(4)]), max_batch=4)
    cols = result.log.columns
    assert cols["kind"] == ["prefill"] + ["decode"] * 4 and cols["requests_count"] == [4] * 5
    prefill, end = cols["step_s"][0], cols["t_s"][-1]
    s = result.summary()
    for name, unit, want in (("ttft", "s", prefill), ("e2e_latency", "s", end),
                             ("tpot", "ms", (end - prefill) / 4 * 1e3)):
        for key in (f"{name}_{unit}", *(f"{name}_p{q}_{unit}" for q in (50, 90, 99))):
            assert s[key] == pytest.approx(want, rel=1e-12), key
    assert s["throughput_req_s"] == pytest.approx(4 / end, rel=1e-12)
    assert s["throughput_tok_s"] == pytest.approx(20 / end, rel=1e-12)
    assert s["sim_s"] == end


@pytest.fixture(scope="module")
def staggered(tmp_path_factory):
    """Twelve requests arriving over 0.3 s with different lengths, batch 4: every latency differs."""
    rng = random.Random(5)
    specs = [(0.025 * i, i % 4, rng.randint(20, 400), rng.randint(2, 40)) for i in range(12)]
    result = sim(hand(specs), max_batch=4)
    out = tmp_path_factory.mktemp("staggered")
    return result, result.write_steps_csv(out / "steps.csv"), result.write_requests_csv(out / "requests.csv")


def test_latency_percentiles_against_the_requests(staggered):
    result, _, requests_csv = staggered
    _, rows = read(requests_csv)
    s = result.summary()
    arrival = [float(r["arrival_s"]) for r in rows]
    first = [float(r["first_token_s"]) for r in rows]
    finish = [float(r["finish_s"]) for r in rows]
    output = [int(r["output_tokens"]) for r in rows]
    values = {
        ("ttft", "s", 1.0): [f - a for f, a in zip(first, arrival)],
        ("e2e_latency", "s", 1.0): [f - a for f, a in zip(finish, arrival)],
        ("tpot", "ms", 1e3): [(e - f) / (n - 1) for e, f, n in zip(finish, first, output)],
    }
    for row, e2e in zip(rows, values[("e2e_latency", "s", 1.0)]):
        assert float(row["e2e_latency_s"]) == pytest.approx(e2e, rel=1e-12)
    for (name, unit, scale), xs in values.items():
        assert len(set(xs)) > 1, name
        cuts = statistics.quantiles(xs, n=100, method="inclusive")
        p = [s[f"{name}_p{q}_{unit}"] for q in (50, 90, 99)]
        assert p == pytest.approx([scale * cuts[q - 1] for q in (50, 90, 99)], rel=1e-12), name
        assert scale * min(xs) <= p[0] <= p[1] <= p[2] <= scale * max(xs) * (1 + 1e-12)
        assert s[f"{name}_{unit}"] == pytest.approx(scale * statistics.fmean(xs), rel=1e-12)
    # every latency is at least its own parts
    assert s["e2e_latency_p50_s"] >= s["ttft_p50_s"] > 0
    span = max(finish) - min(arrival)
    assert s["throughput_req_s"] == pytest.approx(len(rows) / span, rel=1e-12)
    assert s["throughput_tok_s"] == pytest.approx(sum(output) / span, rel=1e-12)


def test_a_run_with_single_token_requests_has_no_tpot_but_every_latency():
    s = sim(hand([(0.0, 0, 50, 1), (0.0, 1, 60, 1)])).summary()
    assert all(math.isnan(s[k]) for k in ("tpot_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms"))
    assert s["absent"]["tpot_p90_ms"] == "no request has a second output token to time"
    assert s["ttft_p90_s"] == s["e2e_latency_p90_s"] > 0          # the first token is the last
    assert not {k for k in s["absent"] if k.startswith(("ttft", "e2e", "throughput"))}


# ---- what it ran with ---------------------------------------------------------------------

@pytest.mark.parametrize("system,link", [("plora", "cxl3.1"), ("grace-hopper", "nvlink-c2c"), ("s-lora", "pcie5")])
def test_the_summary_names_the_gpu_link_model_and_device(system, link):
    assert (load_system_config(system).link or RUN.link) == link
    s = sim(hand([(0.0, 0, 50, 3), (0.0, 1, 60, 2)]), system).summary()
    want = dict(system=system, model=RUN.model, gpu=RUN.gpu, link=link, device=RUN.device)
    assert {k: s[k] for k in want} == want
    printed = [line.split(None, 1) for line in summary_lines(s)]
    for key, value in want.items():
        assert [key, value] in printed
    for key in ("ttft_p50_s", "tpot_p90_ms", "e2e_latency_p99_s", "throughput_req_s", "throughput_tok_s"):
        assert key in {k for k, _ in printed}


def test_a_config_given_as_a_path_is_named_by_its_file(tmp_path):
    gpu = shutil.copy(ROOT / "isa" / "configs" / "gpus" / "h100.json", tmp_path / "bench-gpu.json")
    s = sim(hand([(0.0, 0, 50, 3)]), gpu=str(gpu)).summary()
    assert s["gpu"] == "bench-gpu"


def test_simulate_and_serve_bench_print_the_names_and_percentiles():
    from plora_cli import main
    # the summary is on stdout; progress (a run over 3 s on a busy machine, the device-timing
    # tables measured on a cold cache) goes to stderr, which click's `output` mixes in
    out = CliRunner().invoke(main, ["simulate", "--set", "requests=4", "--set", "system=grace-hopper"],
                             catch_exceptions=False).stdout
    printed = dict(line.split(None, 1) for line in out.splitlines())
    assert (printed["gpu"], printed["link"], printed["model"], printed["device"]) == ("h100", "nvlink-c2c",
                                                                                      "llama2-7b", "paper")
    assert float(printed["ttft_p50_s"]) <= float(printed["ttft_p90_s"]) <= float(printed["ttft_p99_s"])
    bench = CliRunner().invoke(main, ["serve-bench", "--set", "requests=4"], catch_exceptions=False)
    assert bench.exit_code == 0, bench.output
    first = bench.stdout.splitlines()[0]
    assert all(name in first for name in ("plora", "llama2-7b", "h100", "cxl3.1", "4 x paper")), first
    assert "req/s" in bench.stdout and "end-to-end" in bench.stdout


# ---- units in every CSV header ------------------------------------------------------------

def test_steps_and_requests_csv_headers_carry_units(staggered):
    result, steps_csv, requests_csv = staggered
    steps_header, steps = read(steps_csv)
    requests_header, _ = read(requests_csv)
    for header in (steps_header, requests_header):
        assert [c for c in header if not has_unit(c)] == []
    assert tuple(steps_header) == STEP_COLUMNS == tuple(result.log.columns)
    assert {"link_to_device_bytes", "link_to_gpu_bytes", "requests_count", "tokens_count", "step_s",
            "E1_count"} <= set(steps_header)
    assert {"ttft_s", "tpot_s", "e2e_latency_s", "prompt_tokens", "output_tokens"} <= set(requests_header)
    # the counts are whole numbers
    assert all(float(r[c]).is_integer() for r in steps for c in steps_header if c.endswith("_count"))


@pytest.fixture(scope="module")
def sweep_rows(staggered):
    """Summary rows as the sweep command and reproduce write them: axis labels, and
    reproduce's data-parallel replicas."""
    from serving.reproduce import data_parallel_rows
    result = staggered[0]
    rows = [dict(result.summary(), axis_link_gb_s=128, axis_latency_ns=200, axis_devices=4, axis_batch=4,
                 axis_system="plora", axis_requests=12)]
    return rows + data_parallel_rows(RUN.with_(requests=8), "llama2-7b", ("uniform",))


def test_sweep_csv_headers_carry_units_and_read_back_as_the_summary(sweep_rows, tmp_path):
    path = write_csv(sweep_rows, tmp_path / "sweep.csv")
    header, _ = read(path)
    assert [c for c in header if not has_unit(c)] == []
    assert {"requests_count", "steps_count", "decode_steps_count", "devices_count", "max_batch_count",
            "adapters_count", "link_util_frac", "share_E1_frac", "replicas_count", "axis_devices_count",
            "axis_batch_count", "axis_requests_count", "axis_link_gb_s"} <= set(header)
    assert not {"requests", "link_util", "num_devices", "axis_devices"} & set(header)
    back = read_csv(path)
    for want, got in zip(sweep_rows, back):
        for key, value in want.items():
            if key == "absent":
                continue            # a dict, written as its text
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(got[key]), key
            else:
                assert got[key] == value, key          # what reproduce --reuse reads: the same numbers


def test_a_csv_written_before_the_units_reads_the_same(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("system,requests,link_util,num_devices,axis_devices,tpot_ms\nplora,8,0.5,4,4,4.2\n")
    assert read_csv(path) == [dict(system="plora", requests=8, link_util=0.5, num_devices=4, axis_devices=4,
                                   tpot_ms=4.2)]


def test_csv_names_are_one_to_one():
    keys = [*CSV_NAMES, *(f"axis_{a}" for a in AXES)]
    for key in keys:
        assert summary_key(csv_column(key)) == key
        assert has_unit(csv_column(key))
    assert len({csv_column(k) for k in keys}) == len(keys)


# ---- the docs -----------------------------------------------------------------------------

def test_docs_list_every_summary_field_and_csv_column(sweep_rows, staggered):
    docs = (ROOT / "docs" / "serving.md").read_text()
    result = staggered[0]
    with open(staggered[2], newline="") as f:
        requests_header = next(csv.reader(f))
    names = {*result.summary(), *STEP_COLUMNS, *requests_header, *(csv_column(k) for r in sweep_rows for k in r)}
    names = {n for n in names if not n.startswith("axis_")} | {"axis_<name>"}
    missing = sorted(n for n in names if f"`{n}`" not in docs)
    assert missing == []

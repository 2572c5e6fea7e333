"""Trace files (serving.workload.read_trace) against what the files say: Azure's LLM
inference layout, 2023 (7 fractional digits, no offset) and 2024 (an offset, 0 to 9
digits), read back with datetime and Decimal as a second reader; layout detection; bad rows
named by file and line; the first N requests; the adapter assignment of a trace that names
none (seeded, and each popularity's share against its definition); adapter ids as labels.

The samples in tests/data/traces are this project's own synthetic rows in each layout."""
import csv
import datetime
import math
import pathlib
import re
from decimal import Decimal

import numpy as np
import pytest

from serving.workload import (
    AZURE_COLUMNS, Request, Workload, adapter_ranks, generate, load_workload_config, parse_timestamp,
    read_trace, summary, write_trace)

DATA = pathlib.Path(__file__).parents[1] / "data" / "traces"
AZURE_2023 = DATA / "azure_2023_sample.csv"
AZURE_2024 = DATA / "azure_2024_sample.csv"
LABELS = DATA / "labels_sample.csv"


def rows_of(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def exact_seconds(stamp):
    """A TIMESTAMP as exact seconds since 1970 (Decimal), read another way than the code's:
    datetime.strptime for the whole seconds, Decimal for the fraction and the offset."""
    body, offset = stamp, 0
    m = re.search(r"([+-])(\d\d):(\d\d)$", stamp)
    if m:
        body = stamp[:m.start()]
        offset = (1 if m[1] == "+" else -1) * (int(m[2]) * 3600 + int(m[3]) * 60)
    whole, _, frac = body.partition(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return Decimal(int(t.timestamp())) + Decimal("0." + (frac or "0")) - offset


def expected_azure(path):
    """(arrival_s, prompt, output) of every row, arrival after the earliest, sorted by
    arrival with ties in file order."""
    rows = rows_of(path)
    seconds = [exact_seconds(r["TIMESTAMP"]) for r in rows]
    origin = min(seconds)
    out = [(float(s - origin), int(r["ContextTokens"]), int(r["GeneratedTokens"])) for s, r in zip(seconds, rows)]
    return sorted(out, key=lambda x: x[0])


# ---- Azure's layout ---------------------------------------------------------------------

@pytest.mark.parametrize("path", [AZURE_2023, AZURE_2024], ids=["2023", "2024"])
def test_azure_sample_reads_as_the_file_says(path):
    w = read_trace(path)
    want = expected_azure(path)
    got = [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in w.requests]
    assert len(got) == len(want)
    for (t, p, o), (wt, wp, wo) in zip(got, want):
        assert (p, o) == (wp, wo)
        assert t == pytest.approx(wt, rel=1e-15, abs=1e-15)
    assert [r.rid for r in w.requests] == list(range(len(want)))
    assert w.requests[0].arrival_s == 0.0
    assert w.name == path.stem and "Azure" in w.source


def test_2023_keeps_the_seventh_fractional_digit():
    # the sample's first two rows differ by 100 ns, in the 7th digit
    first, second = read_trace(AZURE_2023).requests[:2]
    stamps = [r["TIMESTAMP"] for r in rows_of(AZURE_2023)[:2]]
    assert stamps[0][:-1] == stamps[1][:-1] and int(stamps[1][-1]) - int(stamps[0][-1]) == 1
    assert second.arrival_s - first.arrival_s == pytest.approx(1e-7, abs=1e-12)


def test_2023_spans_hours_and_days():
    rows = rows_of(AZURE_2023)
    last = read_trace(AZURE_2023).requests[-1]
    # 2023-11-16 18:15:46.1234567 to 2023-11-17 00:00:01.5000000
    assert rows[0]["TIMESTAMP"].startswith("2023-11-16 18:15:46") and rows[-1]["TIMESTAMP"].startswith("2023-11-17")
    assert last.arrival_s == pytest.approx((24 * 3600 + 1.5) - (18 * 3600 + 15 * 60 + 46.1234567), abs=1e-9)


def test_2024_rows_are_sorted_by_time_not_file_order():
    rows = rows_of(AZURE_2024)
    file_order = [exact_seconds(r["TIMESTAMP"]) for r in rows]
    assert file_order != sorted(file_order)         # the sample has a row out of order
    prompts = [r.prompt_tokens for r in read_trace(AZURE_2024).requests]
    by_time = [int(r["ContextTokens"]) for _, r in sorted(zip(file_order, rows), key=lambda x: x[0])]
    assert prompts == by_time


@pytest.mark.parametrize("stamp", [
    "2023-11-16 18:15:46.6805900", "2024-05-10 00:00:00.009930+00:00", "2024-05-10 00:00:01+00:00",
    "2024-05-10 00:00:01.123456789+00:00", "2024-05-10 02:30:00.5+02:30", "2024-05-09 21:00:00.5-03:00",
    "2024-02-29 12:00:00", "1999-12-31 23:59:59.9"])
def test_timestamps_read_exactly(stamp):
    ns, has_offset = parse_timestamp(stamp)
    assert Decimal(ns) / 10**9 == exact_seconds(stamp)
    assert has_offset == bool(re.search(r"[+-]\d\d:\d\d$", stamp))


def test_an_offset_moves_the_arrival():
    # 02:00:00.5 at +02:00 is 00:00:00.5 UTC: after 00:00:00 UTC, before 00:00:01 UTC
    a = parse_timestamp("2024-05-10 02:00:00.5+02:00")[0]
    assert parse_timestamp("2024-05-10 00:00:00+00:00")[0] < a < parse_timestamp("2024-05-10 00:00:01+00:00")[0]
    assert a - parse_timestamp("2024-05-10 00:00:00+00:00")[0] == 500_000_000


@pytest.mark.parametrize("stamp", ["2023-11-16", "2023-02-30 00:00:00", "2023-11-16 24:00:00",
                                   "2023-11-16 18:15:46.1234567890", "yesterday", "2023-11-16 18:15:46.+00:00"])
def test_bad_timestamps_are_refused(stamp):
    with pytest.raises(ValueError):
        parse_timestamp(stamp)


# ---- layouts and bad rows ---------------------------------------------------------------

def test_layout_is_told_by_the_header_in_any_order(tmp_path):
    azure = tmp_path / "azure.csv"
    azure.write_text("\ufeffGeneratedTokens,TIMESTAMP,ContextTokens\n7,2023-11-16 18:15:46.0000000,30\n")
    (r,) = read_trace(azure).requests
    assert (r.prompt_tokens, r.output_tokens, r.arrival_s) == (30, 7, 0.0)
    ours = tmp_path / "ours.csv"
    ours.write_text("prompt_tokens,output_tokens,adapter,arrival_s\n30,7,5,2.5\n")
    (r,) = read_trace(ours).requests
    assert (r.prompt_tokens, r.output_tokens, r.arrival_s) == (30, 7, 2.5)


AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_GOOD = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize("text, where, what", [
    ("TIMESTAMP,ContextTokens\n", "line 1", "or Azure's TIMESTAMP,ContextTokens,GeneratedTokens"),
    ("timestamp,contexttokens,generatedtokens\n", "line 1", "the header must be"),
    (AZ, "line 2", "no requests"),
    (AZ + AZ_GOOD + "2023-11-16 18:15:47,-3,44\n", "line 3", "ContextTokens must be an integer >= 0, got '-3'"),
    (AZ + AZ_GOOD + "2023-11-16 18:15:47,30,4.5\n", "line 3", "GeneratedTokens must be an integer >= 0, got '4.5'"),
    (AZ + AZ_GOOD + "2023-11-16 25:15:47,30,4\n", "line 3", "TIMESTAMP must be a date and time"),
    (AZ + AZ_GOOD + "16/11/2023 18:15:47,30,4\n", "line 3", "got '16/11/2023 18:15:47'"),
    (AZ + AZ_GOOD + "2023-11-16 18:15:47,30\n", "line 3", "2 fields, the header has 3"),
    (AZ + AZ_GOOD + "\n2023-11-16 18:15:47+00:00,30,4\n", "line 4", "has UTC offset, but line 2's has none"),
    (AZ + "2024-05-10 00:00:00+00:00,1,1\n2024-05-10 00:00:01,30,4\n", "line 3", "has no UTC offset"),
])
def test_bad_azure_rows_name_file_and_line(tmp_path, text, where, what):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        read_trace(path)
    assert str(e.value).startswith(f"{path}: {where}: ") and what in str(e.value)


# ---- the first N requests ---------------------------------------------------------------

def test_requests_takes_the_first_n_in_arrival_order():
    want = expected_azure(AZURE_2024)
    for n in (1, 3, len(want)):
        w = read_trace(AZURE_2024, requests=n)
        assert [r.prompt_tokens for r in w.requests] == [x[1] for x in want[:n]]
        assert [r.arrival_s for r in w.requests] == pytest.approx([x[0] for x in want[:n]], abs=1e-12)
    with pytest.raises(ValueError, match=rf"requests={len(want) + 1}, but the trace has {len(want)}"):
        read_trace(AZURE_2024, requests=len(want) + 1)


def test_a_config_cuts_a_trace_only_when_told(tmp_path):
    # uniform.json says requests 1024 for its generator; a trace given over it is replayed whole
    n = len(rows_of(AZURE_2023))
    assert len(generate(load_workload_config("uniform", trace=str(AZURE_2023))).requests) == n
    assert len(generate(load_workload_config("uniform", trace=str(AZURE_2023), requests=4)).requests) == 4
    assert load_workload_config("uniform").requests == 1024


def test_our_layout_first_n_keeps_only_their_adapters():
    w = read_trace(LABELS, requests=3)
    rows = rows_of(LABELS)[:3]
    assert w.labels == tuple(sorted({int(r["adapter"]) for r in rows}))


# ---- adapters for a trace that names none -----------------------------------------------

def big_azure(tmp_path, n):
    """An Azure-layout file of n rows, one every 10 ms."""
    path = tmp_path / f"azure{n}.csv"
    start = datetime.datetime(2023, 11, 16, 18, 0, 0)
    lines = [",".join(AZURE_COLUMNS)]
    for i in range(n):
        t = start + datetime.timedelta(milliseconds=10 * i)
        lines.append(f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}0,{100 + i % 900},{1 + i % 300}")
    path.write_text("\n".join(lines) + "\n")
    return path


def adapters_of(w):
    return np.array([r.adapter for r in w.requests])


def test_seed_reproduces_and_changes_the_assignment(tmp_path):
    path = big_azure(tmp_path, 400)
    a, b = (generate(load_workload_config("lmsys", trace=str(path), seed=5)) for _ in range(2))
    c = generate(load_workload_config("lmsys", trace=str(path), seed=6))
    assert a == b
    assert list(adapters_of(a)) != list(adapters_of(c))
    assert a.ranks != c.ranks                       # the seed draws the ranks too
    # the seed changes nothing the file gives
    strip = lambda w: [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in w.requests]   # noqa: E731
    assert strip(a) == strip(c)


def test_every_configured_adapter_is_registered(tmp_path):
    path = big_azure(tmp_path, 50)
    w = generate(load_workload_config("uniform", trace=str(path), adapters=300, seed=2))
    assert len(w.ranks) == 300 and w.labels == tuple(range(300))
    assert w.ranks == adapter_ranks(2, 300)         # as a generated workload's: by (seed, id)
    assert set(adapters_of(w)) <= set(range(300))


N = 20_000


def test_skewed_sends_exactly_the_hot_share_to_the_hot_set(tmp_path):
    path = big_azure(tmp_path, N)
    for requests, hot, share in ((None, 50, 0.8), (1234, 10, 0.65)):
        cfg = load_workload_config("skewed", trace=str(path), requests=requests, hot_adapters=hot, hot_share=share)
        adapters = adapters_of(generate(cfg))
        n = requests or N
        assert len(adapters) == n
        assert np.count_nonzero(adapters < hot) == round(share * n)
        assert len(np.unique(adapters[adapters >= hot])) > 0.5 * (1000 - hot) or n < 2000


def test_zipf_top_adapter_follows_the_closed_form(tmp_path):
    path = big_azure(tmp_path, N)
    for alpha, adapters in ((1.63, 1000), (1.0, 100)):
        w = generate(load_workload_config("uniform", trace=str(path), popularity="zipf", zipf_alpha=alpha,
                                          adapters=adapters))
        counts = np.bincount(adapters_of(w), minlength=adapters)
        p = 1 / sum(k ** -alpha for k in range(1, adapters + 1))     # adapter 0's weight 1 over H(n, alpha)
        sigma = math.sqrt(p * (1 - p) / N)
        assert abs(counts[0] / N - p) < 5 * sigma
        assert counts[0] == counts.max()


def test_uniform_spreads_evenly(tmp_path):
    path = big_azure(tmp_path, N)
    counts = np.bincount(adapters_of(generate(load_workload_config("uniform", trace=str(path), adapters=200))),
                         minlength=200)
    expected = N / 200
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df, z = 199, 3.72                                # Wilson-Hilferty, two-sided p = 2e-4
    lo, hi = (df * (1 - 2 / (9 * df) + s * z * math.sqrt(2 / (9 * df))) ** 3 for s in (-1, 1))
    assert lo < chi2 < hi


def test_assignment_is_the_generators_popularity_stream(tmp_path):
    # a trace of n requests gets the adapters a generated workload of n requests gets
    path = big_azure(tmp_path, 500)
    traced = generate(load_workload_config("lmsys", trace=str(path), seed=3))
    drawn = generate(load_workload_config("lmsys", requests=500, seed=3))
    assert list(adapters_of(traced)) == list(adapters_of(drawn)) and traced.ranks == drawn.ranks


# ---- adapter ids as labels --------------------------------------------------------------

def test_labels_map_densely_and_come_back(tmp_path):
    w = read_trace(LABELS)
    rows = rows_of(LABELS)
    file_labels = sorted({int(r["adapter"]) for r in rows})
    assert file_labels == [7, 20000, 10**7, 10**9]
    assert w.labels == tuple(file_labels) and len(w.ranks) == 4
    for req, row in zip(w.requests, rows):           # the sample is in arrival order already
        assert w.labels[req.adapter] == int(row["adapter"])
        assert w.ranks[req.adapter] == int(row["rank"])
    assert summary(w)["busiest_adapter"] in (20000, 10**9)        # two requests each, the most
    write_trace(w, tmp_path / "back.csv")
    assert [r["adapter"] for r in rows_of(tmp_path / "back.csv")] == [r["adapter"] for r in rows]
    back = read_trace(tmp_path / "back.csv")
    assert (back.labels, back.ranks, back.requests) == (w.labels, w.ranks, w.requests)


def test_a_labels_rank_does_not_depend_on_the_other_labels(tmp_path):
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text("arrival_s,adapter,prompt_tokens,output_tokens\n0,20000,5,5\n0,3,5,5\n")
    two.write_text("arrival_s,adapter,prompt_tokens,output_tokens\n0,1000000000,5,5\n1,20000,5,5\n")
    a, b = read_trace(one, seed=4), read_trace(two, seed=4)
    assert a.ranks[a.labels.index(20000)] == b.ranks[b.labels.index(20000)]
    assert a.ranks[a.labels.index(3)] == adapter_ranks(4, 4)[3]   # small ids keep a generated workload's ranks


def test_huge_labels_read_in_a_blink(tmp_path):
    import time
    path = tmp_path / "huge.csv"
    path.write_text("arrival_s,adapter,prompt_tokens,output_tokens\n"
                    + "".join(f"{i * 0.01},{label},20,5\n" for i, label in enumerate([10**9, 10**7, 20000] * 100)))
    start = time.perf_counter()
    w = read_trace(path)
    assert time.perf_counter() - start < 2.0
    assert w.labels == (20000, 10**7, 10**9) and len(w.ranks) == 3


def test_workload_checks_its_labels():
    with pytest.raises(ValueError, match="labels must be 2 distinct ids"):
        Workload("w", (8, 16), (Request(0, 0.0, 0, 1, 1),), "", labels=(5, 5))
    with pytest.raises(ValueError, match="labels must be 2 distinct ids"):
        Workload("w", (8, 16), (Request(0, 0.0, 0, 1, 1),), "", labels=(5,))
    assert Workload("w", (8, 16), (), "").labels == (0, 1)

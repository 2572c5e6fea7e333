"""The workload generator against independent references: the 80/50 split of Table VII's
skewed workloads, a chi-square bound for uniform popularity (Wilson-Hilferty), Zipf shares
from the formula, Poisson inter-arrival moments, the lognormal moments of the sources
(docs/workloads.md), the context limit, seeding, the trace format and config validation."""
import math

import numpy as np
import pytest

from serving.workload import (
    DEFAULT_RANKS, Request, Workload, adapter_ranks, generate, load_workload_config,
    read_trace, summary, write_trace)

N = 50_000  # requests for the statistical checks


def column(workload, field):
    return np.array([getattr(r, field) for r in workload.requests])


def zipf_share(n, alpha, k=1):
    """Share of the k most popular of n items under weights rank ** -alpha."""
    weights = [rank ** -alpha for rank in range(1, n + 1)]
    return sum(weights[:k]) / sum(weights)


def chi2_quantile(df, z):
    """Wilson-Hilferty: the chi-square quantile at the standard-normal quantile z."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def uniform_chi2(workload):
    counts = np.bincount(column(workload, "adapter"), minlength=len(workload.ranks))
    expected = len(workload.requests) / len(workload.ranks)
    return float(((counts - expected) ** 2 / expected).sum())


# ---- the configs ------------------------------------------------------------------------

NAMES = ("uniform", "skewed", "uniform-long", "skewed-long", "lmsys", "lmsys-long", "poisson")


@pytest.mark.parametrize("name", NAMES)
def test_every_config_generates(name):
    cfg = load_workload_config(name)
    w = generate(cfg)
    s = summary(w)
    assert (w.name, s["requests"], s["adapters"]) == (name, cfg.requests, 1000)
    assert w.source.startswith("lengths: ")
    assert all(r.prompt_tokens + r.output_tokens <= 4096 for r in w.requests)


def test_skewed_sends_80_percent_to_50_adapters():
    w = generate(load_workload_config("skewed", requests=N))
    adapters = column(w, "adapter")
    assert abs(np.mean(adapters < 50) - 0.8) <= 0.02
    assert abs(summary(w)["top_share"] - 0.8) <= 0.02
    # the other 20% spread over the other 950: every one of them is used at N requests
    assert len(np.unique(adapters[adapters >= 50])) == 950


def test_uniform_passes_chi_square_and_skewed_fails_it():
    df = 999
    lo, hi = chi2_quantile(df, -3.72), chi2_quantile(df, 3.72)  # two-sided p = 2e-4
    assert lo < uniform_chi2(generate(load_workload_config("uniform", requests=N))) < hi
    assert uniform_chi2(generate(load_workload_config("skewed", requests=N))) > hi  # the bound has power


def test_zipf_shares_follow_the_formula():
    cfg = load_workload_config("lmsys", requests=N)
    counts = np.bincount(column(generate(cfg), "adapter"), minlength=1000)
    for k in (1, 10, 50):
        assert abs(counts[:k].sum() / N - zipf_share(1000, cfg.zipf_alpha, k)) < 0.01


def test_lmsys_exponent_gives_the_top_model_half_of_25():
    # docs/workloads.md: alpha such that the top of LMSYS-Chat-1M's 25 models gets 1/2
    alpha = load_workload_config("lmsys").zipf_alpha
    assert abs(zipf_share(25, alpha) - 0.5) < 0.005


def test_ranks_come_from_the_set_and_each_appears():
    w = generate(load_workload_config("uniform"))
    assert set(w.ranks) == set(DEFAULT_RANKS) and len(w.ranks) == 1000
    counts = np.array([w.ranks.count(r) for r in DEFAULT_RANKS])
    assert np.all(np.abs(counts - 200) < 5 * math.sqrt(1000 * 0.2 * 0.8))


def test_adapter_ranks_depend_on_seed_and_index_only():
    assert adapter_ranks(3, 10) == adapter_ranks(3, 1000)[:10]
    assert adapter_ranks(3, 1000) != adapter_ranks(4, 1000)
    assert set(adapter_ranks(0, 100, (4, 12))) == {4, 12}


def test_poisson_interarrivals_have_the_rate():
    cfg = load_workload_config("poisson", requests=N)
    arrivals = column(generate(cfg), "arrival_s")
    gaps = np.diff(np.concatenate([[0.0], arrivals]))
    assert np.all(gaps >= 0) and arrivals[0] > 0
    assert abs(gaps.mean() * cfg.rate_per_s - 1) < 0.03  # exponential: mean 1/rate ...
    assert abs(gaps.std() / gaps.mean() - 1) < 0.04       # ... and CV 1


def test_offline_is_a_closed_batch():
    w = generate(load_workload_config("lmsys"))
    assert set(column(w, "arrival_s")) == {0.0}
    assert [r.rid for r in w.requests] == list(range(len(w.requests)))


@pytest.mark.parametrize("field, mean, std, tol", [("prompt_tokens", 69.5, 143.0, 0.04),
                                                   ("output_tokens", 214.5, 226.0, 0.03)])
def test_lmsys_lengths_have_the_sources_moments(field, mean, std, tol):
    tokens = column(generate(load_workload_config("lmsys", requests=N)), field)
    assert abs(tokens.mean() / mean - 1) < tol
    sigma = math.sqrt(math.log(1 + (std / mean) ** 2))   # the lognormal with those moments
    assert abs(np.log(tokens).std() / sigma - 1) < 0.05
    assert abs(np.median(tokens) / (mean / math.sqrt(1 + (std / mean) ** 2)) - 1) < 0.05


def test_uniform_lengths_cover_their_range():
    w = generate(load_workload_config("uniform-long", requests=N))
    prompt, output = column(w, "prompt_tokens"), column(w, "output_tokens")
    assert (prompt.min(), prompt.max()) == (2048, 3584)
    assert (output.min(), output.max()) == (8, 511)
    assert abs(prompt.mean() - (2048 + 3584) / 2) < 10


def test_max_context_is_respected():
    w = generate(load_workload_config("lmsys-long", requests=N, max_context=2600))
    total = column(w, "prompt_tokens") + column(w, "output_tokens")
    assert total.max() == 2600 and np.all(column(w, "prompt_tokens") <= 2599)
    assert np.all(column(w, "output_tokens") >= 1)


def test_fixed_lengths_and_clip():
    cfg = load_workload_config("uniform", prompt={"dist": "fixed", "value": 100},
                               output={"dist": "lognormal", "mean": 200, "std": 200, "min": 50, "max": 300})
    w = generate(cfg)
    assert set(column(w, "prompt_tokens")) == {100}
    out = column(w, "output_tokens")
    assert out.min() == 50 and out.max() == 300


# ---- seeding ----------------------------------------------------------------------------

def test_seeds_reproduce_and_differ():
    a, b = (generate(load_workload_config("poisson", seed=7)) for _ in range(2))
    assert a == b
    assert generate(load_workload_config("poisson", seed=8)).requests != a.requests


def test_arrivals_draw_from_their_own_stream():
    offline = generate(load_workload_config("lmsys", requests=6000))
    poisson = generate(load_workload_config("poisson"))
    strip = lambda w: [(r.adapter, r.prompt_tokens, r.output_tokens) for r in w.requests]
    assert strip(offline) == strip(poisson) and offline.ranks == poisson.ranks


# ---- traces -----------------------------------------------------------------------------

def test_trace_round_trip(tmp_path):
    cfg = load_workload_config("poisson", requests=500, seed=3)
    w = generate(cfg)
    write_trace(w, tmp_path / "t.csv")
    back = read_trace(tmp_path / "t.csv", seed=cfg.seed, rank_choices=cfg.ranks, adapters=cfg.adapters)
    assert back.requests == w.requests and back.ranks == w.ranks
    assert back.name == "t"


def test_trace_sorted_on_read_and_ranks_drawn_when_absent(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("adapter,arrival_s,prompt_tokens,output_tokens\n"
                    "4,2.5,10,20\n1,0.5,11,21\n2,2.5,12,22\n\n")
    w = read_trace(path, seed=9)
    # the ids 1, 2, 4 are labels: adapters 0, 1, 2 in id order, each with the rank of its id
    assert w.labels == (1, 2, 4)
    assert w.requests == (Request(0, 0.5, 0, 11, 21), Request(1, 2.5, 2, 10, 20), Request(2, 2.5, 1, 12, 22))
    assert w.ranks == tuple(adapter_ranks(9, 5)[i] for i in (1, 2, 4))


def test_config_trace_replays_the_file(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("arrival_s,adapter,prompt_tokens,output_tokens,rank\n0,0,5,6,64\n1,1,7,8,8\n")
    w = generate(load_workload_config("lmsys", trace=str(path)))
    assert w.ranks == (64, 8) and [r.prompt_tokens for r in w.requests] == [5, 7]


HEADER = "arrival_s,adapter,prompt_tokens,output_tokens,rank\n"
GOOD = "0.0,3,10,20,8\n"


@pytest.mark.parametrize("text, where, what", [
    ("", "line 1", "empty file"),
    ("arrival_s,adapter,prompt_tokens\n0,1,2\n", "line 1", "missing ['output_tokens']"),
    ("arrival_s,adapter,prompt_tokens,output_tokens,ranks\n", "line 1", "unknown ['ranks']"),
    (HEADER, "line 2", "no requests"),
    (HEADER + GOOD + "0.0,3,-5,20,8\n", "line 3", "prompt_tokens must be an integer >= 1, got '-5'"),
    (HEADER + GOOD + "0.0,3,10,0,8\n", "line 3", "output_tokens must be an integer >= 1"),
    (HEADER + GOOD + "0.0,1.5,10,20,8\n", "line 3", "adapter must be an integer >= 0, got '1.5'"),
    (HEADER + GOOD + "0.0,x,10,20,8\n", "line 3", "adapter must be"),
    (HEADER + GOOD + "0.0,-1,10,20,8\n", "line 3", "adapter must be"),
    (HEADER + GOOD + "0.0,4,10,20,0\n", "line 3", "rank must be an integer >= 1, got '0'"),
    (HEADER + GOOD + "0.0,3,10,20,16\n", "line 3", "adapter 3 has rank 16 here but 8 on line 2"),
    (HEADER + GOOD + "0.0,3,10,20\n", "line 3", "4 fields, the header has 5"),
    (HEADER + GOOD + "-1,3,10,20,8\n", "line 3", "arrival_s must be a finite number >= 0"),
    (HEADER + GOOD + "nan,3,10,20,8\n", "line 3", "arrival_s must be"),
])
def test_bad_trace_rows_name_file_and_line(tmp_path, text, where, what):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        read_trace(path)
    assert str(e.value).startswith(f"{path}: {where}: ") and what in str(e.value)


def test_trace_adapter_beyond_the_count(tmp_path):
    path = tmp_path / "few.csv"
    path.write_text(HEADER + GOOD)
    with pytest.raises(ValueError, match="line 2: adapter must be < adapters=2, got 3"):
        read_trace(path, adapters=2)


# ---- config validation ------------------------------------------------------------------

@pytest.mark.parametrize("name, overrides, field", [
    ("lmsys", {"popularity": "pareto"}, "popularity"),
    ("lmsys", {"adapters": 0}, "adapters"),
    ("lmsys", {"requests": 1.5}, "requests"),
    ("lmsys", {"requests": True}, "requests"),
    ("skewed", {"hot_adapters": 1000}, "hot_adapters"),
    ("skewed", {"hot_share": 1.2}, "hot_share"),
    ("lmsys", {"zipf_alpha": -1}, "zipf_alpha"),
    ("lmsys", {"ranks": []}, "ranks"),
    ("lmsys", {"ranks": [8, 8]}, "ranks"),
    ("lmsys", {"ranks": [0, 8]}, "ranks"),
    ("lmsys", {"max_context": 1}, "max_context"),
    ("lmsys", {"arrival": "burst"}, "arrival"),
    ("lmsys", {"rate_per_s": 5.0}, "rate_per_s"),
    ("poisson", {"rate_per_s": 0}, "rate_per_s"),
    ("poisson", {"rate_per_s": None}, "rate_per_s"),
    ("lmsys", {"seed": -1}, "seed"),
    ("lmsys", {"prompt": None}, "prompt"),
    ("lmsys", {"prompt": {"dist": "gamma"}}, "prompt: dist"),
    ("lmsys", {"prompt": {"dist": "lognormal", "mean": 69.5}}, "prompt: std is required"),
    ("lmsys", {"output": {"dist": "lognormal", "mean": 69.5, "std": -1}}, "output: std must"),
    ("lmsys", {"output": {"dist": "uniform", "low": 10, "high": 5}}, "output: high must"),
    ("lmsys", {"output": {"dist": "uniform", "low": 10, "high": 50, "mean": 3}}, "output: mean is not"),
    ("lmsys", {"output": {"dist": "fixed", "value": 3, "sigma": 1}}, r"output: unknown keys \['sigma'\]"),
    ("lmsys", {"output": {"dist": "fixed", "value": 3, "min": 5, "max": 4}}, "output: max must"),
])
def test_bad_config_values_name_the_field(name, overrides, field):
    with pytest.raises(ValueError, match=f"workload config '{name}': {field}"):
        load_workload_config(name, **overrides)


def test_unknown_keys_are_named(tmp_path):
    path = tmp_path / "typo.json"
    path.write_text('{"popularity": "uniform", "adapter": 10, "prompt": {"dist": "fixed", "value": 1},'
                    ' "output": {"dist": "fixed", "value": 1}}')
    with pytest.raises(ValueError, match=r"unknown keys \['adapter'\]"):
        load_workload_config(path)
    with pytest.raises(ValueError, match=r"unknown keys \['rate'\]"):
        load_workload_config("poisson", rate=3)


def test_workload_checks_its_invariants():
    with pytest.raises(ValueError, match="sorted"):
        Workload("w", (8,), (Request(0, 1.0, 0, 1, 1), Request(1, 0.5, 0, 1, 1)), "")
    with pytest.raises(ValueError, match="outside 0..0"):
        Workload("w", (8,), (Request(0, 0.0, 1, 1, 1),), "")

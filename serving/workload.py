"""Request streams for the serving simulator: PLoRA's workloads (seed 000, section VII-A,
Table VII) as configs, and trace replay. Where every number comes from: docs/workloads.md.

A workload is one LoRA rank per adapter and the requests, sorted by (arrival, rid). A config
(`configs/workloads/<name>.json`) names the adapter popularity (uniform; skewed, a share of
the requests to a hot set; zipf), the prompt and output length distributions, the context
limit, the arrivals (a closed batch at t=0, or Poisson) and a seed; `generate` draws it.

Seeding: adapter i's rank depends only on (seed, i), so adding adapters keeps the ranks of
the others; popularity, prompt lengths, output lengths and arrivals each draw from their own
stream of the seed, so two configs that differ only in arrivals get the same requests.

Trace CSV (`read_trace`, `write_trace`; a config's `trace` replays one):

    arrival_s,adapter,prompt_tokens,output_tokens[,rank]

one request a row, in any order (sorted by arrival on read, ties in file order; rid = the
position after sorting); arrival_s a finite number >= 0, adapter an integer >= 0, the token
counts integers >= 1, rank (optional column) an integer >= 1 and the same on every row of
one adapter. Adapters with no rank in the file get one drawn as `generate` does. A bad row
raises ValueError naming the file, the line and the problem.
"""
import csv
import dataclasses
import math
import pathlib

import numpy as np

from isa.config import read_config

CONFIG_DIR = pathlib.Path(__file__).parent / "configs" / "workloads"
TRACE_COLUMNS = ("arrival_s", "adapter", "prompt_tokens", "output_tokens")
DEFAULT_RANKS = (8, 16, 32, 64, 128)   # "a dimension randomly chosen from [8, 16, 32, 64, 128]"
POPULARITIES = ("uniform", "skewed", "zipf")
ARRIVALS = ("offline", "poisson")
_LENGTH_PARAMS = {"lognormal": ("mean", "std"), "uniform": ("low", "high"), "fixed": ("value",)}


@dataclasses.dataclass(frozen=True)
class Request:
    rid: int
    arrival_s: float
    adapter: int
    prompt_tokens: int
    output_tokens: int


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    ranks: tuple[int, ...]              # ranks[i]: adapter i's LoRA rank
    requests: tuple[Request, ...]       # sorted by (arrival_s, rid)
    source: str                         # one line: where the lengths came from

    def __post_init__(self):
        keys = [(r.arrival_s, r.rid) for r in self.requests]
        if keys != sorted(keys):
            raise ValueError(f"workload {self.name!r}: requests must be sorted by (arrival_s, rid)")
        if any(not 0 <= r.adapter < len(self.ranks) for r in self.requests):
            raise ValueError(f"workload {self.name!r}: a request names an adapter outside "
                             f"0..{len(self.ranks) - 1}")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclasses.dataclass(frozen=True)
class Lengths:
    """Token counts: lognormal with this mean and std (the moments a dataset paper reports),
    uniform over the integers low..high, or fixed; rounded, then clipped to [min, max]."""
    dist: str
    mean: float | None = None
    std: float | None = None
    low: int | None = None
    high: int | None = None
    value: int | None = None
    min: int = 1
    max: int | None = None

    def __post_init__(self):
        if self.dist not in _LENGTH_PARAMS:
            raise ValueError(f"dist must be one of {sorted(_LENGTH_PARAMS)}, got {self.dist!r}")
        params = _LENGTH_PARAMS[self.dist]
        for name in ("mean", "std", "low", "high", "value"):
            given = getattr(self, name)
            if name in params and given is None:
                raise ValueError(f"{name} is required for dist {self.dist!r}")
            if name not in params and given is not None:
                raise ValueError(f"{name} is not a parameter of dist {self.dist!r}, got {given!r}")
        if self.dist == "lognormal":
            for name in ("mean", "std"):
                if not (_is_real(getattr(self, name)) and getattr(self, name) > 0):
                    raise ValueError(f"{name} must be a number > 0, got {getattr(self, name)!r}")
        for name in ("low", "high", "value", "min", "max"):
            given = getattr(self, name)
            if given is not None and not (_is_int(given) and given >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {given!r}")
        if self.dist == "uniform" and self.high < self.low:
            raise ValueError(f"high must be >= low={self.low!r}, got {self.high!r}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max must be >= min={self.min!r}, got {self.max!r}")

    def sample(self, rng, n):
        if self.dist == "lognormal":
            sigma2 = math.log1p((self.std / self.mean) ** 2)       # moments -> (mu, sigma)
            x = rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), n)
            tokens = np.rint(x).astype(np.int64)
        elif self.dist == "uniform":
            tokens = rng.integers(self.low, self.high, n, endpoint=True)
        else:
            tokens = np.full(n, self.value, dtype=np.int64)
        return np.clip(tokens, self.min, self.max)


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    name: str
    prompt: Lengths | None = None       # required unless `trace` is set
    output: Lengths | None = None
    popularity: str = "uniform"
    adapters: int = 1000
    requests: int = 1024
    hot_adapters: int = 50              # skewed: adapters 0..hot_adapters-1 ...
    hot_share: float = 0.8              # ... get exactly this share of the requests
    zipf_alpha: float = 1.0             # zipf: adapter i's weight (i + 1) ** -zipf_alpha
    ranks: tuple[int, ...] = DEFAULT_RANKS
    max_context: int = 4096             # prompt + output <= max_context
    arrival: str = "offline"            # offline: a closed batch at t=0
    rate_per_s: float | None = None     # poisson: mean arrivals per second
    seed: int = 0
    trace: str | None = None            # a trace CSV: the requests come from it
    source: str = ""                    # where the lengths come from, one line

    def __post_init__(self):
        def need(cond, field, what):
            if not cond:
                raise ValueError(f"workload config {self.name!r}: {field} {what}, "
                                 f"got {getattr(self, field)!r}")
        for field in ("prompt", "output"):
            spec = getattr(self, field)
            if isinstance(spec, dict):
                unknown = sorted(set(spec) - {f.name for f in dataclasses.fields(Lengths)})
                if unknown:
                    raise ValueError(f"workload config {self.name!r}: {field}: unknown keys {unknown!r}")
                try:
                    spec = Lengths(**spec)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"workload config {self.name!r}: {field}: {e}") from None
                object.__setattr__(self, field, spec)
            need(isinstance(spec, Lengths) or (spec is None and self.trace is not None), field,
                 "must be a length distribution (required unless trace is set)")
        if isinstance(self.ranks, list):
            object.__setattr__(self, "ranks", tuple(self.ranks))
        need(self.popularity in POPULARITIES, "popularity", f"must be one of {POPULARITIES}")
        for field in ("adapters", "requests", "hot_adapters"):
            value = getattr(self, field)
            need(_is_int(value) and value >= 1, field, "must be an integer >= 1")
        need(self.popularity != "skewed" or self.hot_adapters < self.adapters, "hot_adapters",
             f"must be < adapters={self.adapters!r} for skewed popularity")
        need(_is_real(self.hot_share) and 0 <= self.hot_share <= 1, "hot_share", "must be in [0, 1]")
        need(_is_real(self.zipf_alpha) and self.zipf_alpha >= 0, "zipf_alpha", "must be a number >= 0")
        need(isinstance(self.ranks, tuple) and len(self.ranks) > 0
             and all(_is_int(r) and r >= 1 for r in self.ranks) and len(set(self.ranks)) == len(self.ranks),
             "ranks", "must be distinct integers >= 1")
        need(_is_int(self.max_context) and self.max_context >= 2, "max_context", "must be an integer >= 2")
        need(self.arrival in ARRIVALS, "arrival", f"must be one of {ARRIVALS}")
        if self.arrival == "poisson":
            need(_is_real(self.rate_per_s) and self.rate_per_s > 0, "rate_per_s",
                 "must be a number > 0 for poisson arrivals")
        else:
            need(self.rate_per_s is None, "rate_per_s", "is only for poisson arrivals")
        need(_is_int(self.seed) and self.seed >= 0, "seed", "must be an integer >= 0")
        need(self.trace is None or isinstance(self.trace, str), "trace", "must be a path or null")
        need(isinstance(self.source, str), "source", "must be a string")


def load_workload_config(name_or_path="lmsys", **overrides):
    """`configs/workloads/<name>.json` (or a .json path), with fields replaced by `overrides`."""
    data = read_config(CONFIG_DIR, "workload", name_or_path)
    unknown = (set(data) | set(overrides)) - {f.name for f in dataclasses.fields(WorkloadConfig)}
    if unknown:
        raise ValueError(f"workload config {str(name_or_path)!r}: unknown keys {sorted(unknown)!r}")
    data.update(overrides)
    return WorkloadConfig(**data)


def adapter_ranks(seed, adapters, choices=DEFAULT_RANKS):
    """Each adapter's rank, uniform over `choices`; adapter i's from a hash of (seed, i) alone."""
    return tuple(choices[int(np.random.SeedSequence((seed, i)).generate_state(1)[0]) % len(choices)]
                 for i in range(adapters))


def _pick_adapters(cfg, rng):
    n = cfg.requests
    if cfg.popularity == "uniform":
        return rng.integers(0, cfg.adapters, n)
    if cfg.popularity == "zipf":
        weights = np.arange(1, cfg.adapters + 1, dtype=float) ** -cfg.zipf_alpha
        return rng.choice(cfg.adapters, n, p=weights / weights.sum())
    hot = round(cfg.hot_share * n)      # skewed: exactly this many requests to the hot set
    picks = np.concatenate([rng.integers(0, cfg.hot_adapters, hot),
                            rng.integers(cfg.hot_adapters, cfg.adapters, n - hot)])
    return rng.permutation(picks)


def _describe(cfg):
    def one(lengths):
        params = ", ".join(f"{p}={getattr(lengths, p)!r}" for p in _LENGTH_PARAMS[lengths.dist])
        return f"{lengths.dist}({params})"
    return f"generated: prompt {one(cfg.prompt)}, output {one(cfg.output)}, max_context {cfg.max_context}"


def generate(cfg: WorkloadConfig) -> Workload:
    if cfg.trace is not None:
        return read_trace(cfg.trace, ranks_seed=cfg.seed, rank_choices=cfg.ranks)
    streams = np.random.SeedSequence(cfg.seed).spawn(4)
    adapter_rng, prompt_rng, output_rng, arrival_rng = (np.random.default_rng(s) for s in streams)
    n = cfg.requests
    adapters = _pick_adapters(cfg, adapter_rng)
    prompt = np.minimum(cfg.prompt.sample(prompt_rng, n), cfg.max_context - 1)
    output = np.minimum(cfg.output.sample(output_rng, n), cfg.max_context - prompt)
    if cfg.arrival == "poisson":
        arrivals = np.cumsum(arrival_rng.exponential(1.0 / cfg.rate_per_s, n))
    else:
        arrivals = np.zeros(n)
    requests = tuple(Request(i, float(t), int(a), int(p), int(o))
                     for i, (t, a, p, o) in enumerate(zip(arrivals, adapters, prompt, output)))
    return Workload(cfg.name, adapter_ranks(cfg.seed, cfg.adapters, cfg.ranks), requests,
                    cfg.source or _describe(cfg))


def read_trace(path, ranks_seed=0, rank_choices=DEFAULT_RANKS, adapters=None) -> Workload:
    """The trace CSV at `path` (format: the module docstring). `adapters`: how many the
    workload has (default: the largest id in the file + 1)."""
    path = pathlib.Path(path)

    def bad(line, what):
        raise ValueError(f"{path}: line {line}: {what}")

    def parse(line, column, text, convert, ok, want):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            bad(line, f"{column} must be {want}, got {text!r}")
        return value

    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            bad(1, f"empty file; the header is {','.join(TRACE_COLUMNS)}[,rank]")
        header = [h.strip() for h in header]
        missing = [c for c in TRACE_COLUMNS if c not in header]
        unknown = [c for c in header if c not in TRACE_COLUMNS + ("rank",)]
        if missing or unknown or len(set(header)) != len(header):
            bad(1, f"the header must be {','.join(TRACE_COLUMNS)}[,rank] in any order "
                   f"(missing {missing}, unknown {unknown}), got {','.join(header)!r}")
        rows, file_ranks = [], {}
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                bad(line, f"{len(row)} fields, the header has {len(header)}")
            cell = dict(zip(header, (c.strip() for c in row)))
            arrival = parse(line, "arrival_s", cell["arrival_s"], float,
                            lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")
            adapter = parse(line, "adapter", cell["adapter"], int, lambda v: v >= 0, "an integer >= 0")
            if adapters is not None and adapter >= adapters:
                bad(line, f"adapter must be < adapters={adapters}, got {adapter}")
            tokens = [parse(line, c, cell[c], int, lambda v: v >= 1, "an integer >= 1")
                      for c in ("prompt_tokens", "output_tokens")]
            if "rank" in cell:
                rank = parse(line, "rank", cell["rank"], int, lambda v: v >= 1, "an integer >= 1")
                first = file_ranks.setdefault(adapter, (rank, line))
                if first[0] != rank:
                    bad(line, f"adapter {adapter} has rank {rank} here but {first[0]} on line {first[1]}")
            rows.append((arrival, adapter, *tokens))
    if not rows:
        bad(2, "no requests after the header")
    count = adapters if adapters is not None else max(r[1] for r in rows) + 1
    ranks = list(adapter_ranks(ranks_seed, count, rank_choices))
    for adapter, (rank, _) in file_ranks.items():
        ranks[adapter] = rank
    rows.sort(key=lambda r: r[0])       # stable: ties keep the file's order
    requests = tuple(Request(i, *r) for i, r in enumerate(rows))
    return Workload(path.stem, tuple(ranks), requests, f"trace {path}")


def write_trace(workload: Workload, path):
    """`workload` as a trace CSV with the rank column; `read_trace` gives the requests back."""
    with pathlib.Path(path).open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(TRACE_COLUMNS + ("rank",))
        for r in workload.requests:       # repr(float) reads back exactly
            writer.writerow((repr(r.arrival_s), r.adapter, r.prompt_tokens, r.output_tokens,
                             workload.ranks[r.adapter]))


def summary(workload: Workload, top=50) -> dict:
    """Counts and token statistics of a workload (plain numbers, for a table or JSON)."""
    reqs = workload.requests
    prompt = np.array([r.prompt_tokens for r in reqs])
    output = np.array([r.output_tokens for r in reqs])
    arrivals = np.array([r.arrival_s for r in reqs])
    counts = np.bincount([r.adapter for r in reqs], minlength=len(workload.ranks))
    return {
        "name": workload.name,
        "requests": len(reqs),
        "adapters": len(workload.ranks),
        "adapters_used": int(np.count_nonzero(counts)),
        "mean_rank": float(np.mean(workload.ranks)),
        "prompt_mean": float(prompt.mean()),
        "prompt_p50": float(np.percentile(prompt, 50)),
        "prompt_p99": float(np.percentile(prompt, 99)),
        "output_mean": float(output.mean()),
        "output_p50": float(np.percentile(output, 50)),
        "output_p99": float(np.percentile(output, 99)),
        "top_adapters": top,
        "top_share": float(np.sort(counts)[::-1][:top].sum() / len(reqs)),
        "duration_s": float(arrivals[-1] - arrivals[0]),
    }

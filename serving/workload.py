"""Request streams for the serving simulator: PLoRA's workloads (seed 000, section VII-A,
Table VII) as configs, and trace replay. Where every number comes from: docs/workloads.md.

A workload is one LoRA rank per adapter and the requests, sorted by (arrival, rid). A config
(`configs/workloads/<name>.json`) names the adapter popularity (uniform; skewed, a share of
the requests to a hot set; zipf), the prompt and output length distributions, the context
limit, the arrivals (a closed batch at t=0, or Poisson) and a seed; `generate` draws it.

Seeding: adapter i's rank depends only on (seed, i), so adding adapters keeps the ranks of
the others; popularity, prompt lengths, output lengths and arrivals each draw from their own
stream of the seed, so two configs that differ only in arrivals get the same requests.

Traces (`read_trace`, `write_trace`; a config's `trace` replays one), two layouts told apart
by the header:

    arrival_s,adapter,prompt_tokens,output_tokens[,rank]     this project's, any column order
    TIMESTAMP,ContextTokens,GeneratedTokens                  Azure's LLM inference traces

This project's: one request a row, arrival_s a finite number >= 0, adapter an integer >= 0
(a label: the workload numbers the distinct labels 0..k-1 in label order and keeps them in
`Workload.labels`), the token counts integers >= 1, rank (optional column) an integer >= 1
and the same on every row of one adapter; an adapter with no rank in the file gets the
rank of (seed, label), as `generate` draws one. Azure's (2023: AzureLLMInferenceTrace_conv
/ _code.csv; 2024: the _1week files): TIMESTAMP a date and time with 0 to 9 fractional
digits and an optional UTC offset, the arrival its seconds after the earliest one; the
token counts integers >= 0 (a count of 0, which no server runs, is the engine's to refuse,
clip or drop, as an over-long request is); the trace names no adapters, so the config's
popularity assigns them, drawn from the seed's popularity stream as `generate` draws them.
Rows are sorted by arrival on read (ties in file order), `requests` takes the first N, and
the rid is the position after that. A bad row raises ValueError naming the file, the line
and the problem.
"""
import csv
import dataclasses
import datetime
import math
import pathlib
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from isa.config import read_config

CONFIG_DIR = pathlib.Path(__file__).parent / "configs" / "workloads"
TRACE_COLUMNS = ("arrival_s", "adapter", "prompt_tokens", "output_tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")   # Azure/AzurePublicDataset, 2023 and 2024
DEFAULT_RANKS = (8, 16, 32, 64, 128)   # "a dimension randomly chosen from [8, 16, 32, 64, 128]"
POPULARITIES = ("uniform", "skewed", "zipf")
ARRIVALS = ("offline", "poisson")
CONTEXT_OVERFLOW = ("refuse", "clip", "drop")   # what a run does with requests its model cannot hold
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
    labels: tuple[int, ...] = None      # type: ignore[assignment]  # labels[i]: adapter i's id in its trace (default i), for reports

    def __post_init__(self) -> None:
        # the systems index adapters 0..k-1, whatever ids a trace gives them (20000, 10**9)
        if self.labels is None:
            object.__setattr__(self, "labels", tuple(range(len(self.ranks))))
        if len(self.labels) != len(self.ranks) or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"workload {self.name!r}: labels must be {len(self.ranks)} distinct ids, "
                             f"one per rank, got {len(self.labels)} ({len(set(self.labels))} distinct)")
        keys = [(r.arrival_s, r.rid) for r in self.requests]
        if keys != sorted(keys):
            raise ValueError(f"workload {self.name!r}: requests must be sorted by (arrival_s, rid)")
        if any(not 0 <= r.adapter < len(self.ranks) for r in self.requests):
            raise ValueError(f"workload {self.name!r}: a request names an adapter outside "
                             f"0..{len(self.ranks) - 1}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
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

    def __post_init__(self) -> None:
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
        if self.dist == "uniform" and self.high < self.low:  # type: ignore[operator]  # both given (above)
            raise ValueError(f"high must be >= low={self.low!r}, got {self.high!r}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max must be >= min={self.min!r}, got {self.max!r}")

    def sample(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        if self.dist == "lognormal":
            mean, std = self.mean, self.std
            assert mean is not None and std is not None     # __post_init__: lognormal has both
            sigma2 = math.log1p((std / mean) ** 2)       # moments -> (mu, sigma)
            x = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
            tokens = np.rint(x).astype(np.int64)
        elif self.dist == "uniform":
            tokens = rng.integers(self.low, self.high, n, endpoint=True)  # type: ignore[arg-type]  # both given
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
    requests: int | None = None         # generated: 1024 unless given; a trace: its first N (None: all)
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

    def __post_init__(self) -> None:
        def need(cond: object, field: str, what: str) -> None:
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
        if self.requests is None and self.trace is None:
            object.__setattr__(self, "requests", 1024)
        need(self.popularity in POPULARITIES, "popularity", f"must be one of {POPULARITIES}")
        for field in ("adapters", "requests", "hot_adapters"):
            value = getattr(self, field)
            need((_is_int(value) and value >= 1) or (field == "requests" and value is None), field,
                 "must be an integer >= 1" + (" (or null: the whole trace)" if field == "requests" else ""))
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
            need(_is_real(self.rate_per_s) and self.rate_per_s > 0, "rate_per_s",  # type: ignore[operator]
                 "must be a number > 0 for poisson arrivals")
        else:
            need(self.rate_per_s is None, "rate_per_s", "is only for poisson arrivals")
        need(_is_int(self.seed) and self.seed >= 0, "seed", "must be an integer >= 0")
        need(self.trace is None or isinstance(self.trace, str), "trace", "must be a path or null")
        need(isinstance(self.source, str), "source", "must be a string")


def load_workload_config(name_or_path: str | pathlib.Path = "lmsys", **overrides: Any) -> WorkloadConfig:
    """`configs/workloads/<name>.json` (or a .json path), with fields replaced by `overrides`.
    A `trace` given here replays the whole file unless `requests` is given too: the config's
    own request count is its generator's, not a cut of someone's trace."""
    data = read_config(CONFIG_DIR, "workload", name_or_path)
    unknown = (set(data) | set(overrides)) - {f.name for f in dataclasses.fields(WorkloadConfig)}
    if unknown:
        raise ValueError(f"workload config {str(name_or_path)!r}: unknown keys {sorted(unknown)!r}")
    if overrides.get("trace") is not None and "requests" not in overrides:
        data.pop("requests", None)
    data.update(overrides)
    return WorkloadConfig(**data)


def adapter_rank(seed: int, label: int, choices: Sequence[int] = DEFAULT_RANKS) -> int:
    """Adapter `label`'s rank, uniform over `choices`, from a hash of (seed, label) alone."""
    return choices[int(np.random.SeedSequence((seed, label)).generate_state(1)[0]) % len(choices)]


def adapter_ranks(seed: int, adapters: int, choices: Sequence[int] = DEFAULT_RANKS) -> tuple[int, ...]:
    """The ranks of adapters 0..adapters-1 (`adapter_rank` of each)."""
    return tuple(adapter_rank(seed, i, choices) for i in range(adapters))


def _pick_adapters(cfg: WorkloadConfig, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
    """`n` requests' adapters under `cfg`'s popularity."""
    if cfg.popularity == "uniform":
        return rng.integers(0, cfg.adapters, n)
    if cfg.popularity == "zipf":
        weights = np.arange(1, cfg.adapters + 1, dtype=float) ** -cfg.zipf_alpha
        return rng.choice(cfg.adapters, n, p=weights / weights.sum())
    hot = round(cfg.hot_share * n)      # skewed: exactly this many requests to the hot set
    picks = np.concatenate([rng.integers(0, cfg.hot_adapters, hot),
                            rng.integers(cfg.hot_adapters, cfg.adapters, n - hot)])
    return rng.permutation(picks)


def _streams(seed: int) -> list[np.random.Generator]:
    """The seed's four streams: popularity, prompt lengths, output lengths, arrivals."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]


def _describe(cfg: WorkloadConfig) -> str:
    def one(lengths: Lengths | None) -> str:
        assert lengths is not None
        params = ", ".join(f"{p}={getattr(lengths, p)!r}" for p in _LENGTH_PARAMS[lengths.dist])
        return f"{lengths.dist}({params})"
    return f"generated: prompt {one(cfg.prompt)}, output {one(cfg.output)}, max_context {cfg.max_context}"


def generate(cfg: WorkloadConfig) -> Workload:
    if cfg.trace is not None:
        return read_trace(cfg.trace, seed=cfg.seed, rank_choices=cfg.ranks, requests=cfg.requests, assign=cfg)
    adapter_rng, prompt_rng, output_rng, arrival_rng = _streams(cfg.seed)
    n = cfg.requests
    # __post_init__: without a trace, both lengths are given and `requests` defaults to 1024
    assert n is not None and cfg.prompt is not None and cfg.output is not None
    adapters = _pick_adapters(cfg, adapter_rng, n)
    prompt = np.minimum(cfg.prompt.sample(prompt_rng, n), cfg.max_context - 1)
    output = np.minimum(cfg.output.sample(output_rng, n), cfg.max_context - prompt)
    if cfg.arrival == "poisson":
        arrivals = np.cumsum(arrival_rng.exponential(1.0 / cfg.rate_per_s, n))  # type: ignore[operator]
    else:
        arrivals = np.zeros(n)
    requests = tuple(Request(i, float(t), int(a), int(p), int(o))
                     for i, (t, a, p, o) in enumerate(zip(arrivals, adapters, prompt, output, strict=True)))
    return Workload(cfg.name, adapter_ranks(cfg.seed, cfg.adapters, cfg.ranks), requests,
                    cfg.source or _describe(cfg))


_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                        r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?")
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
_TIMESTAMP_WANT = "a date and time like 2023-11-16 18:15:46.6805900 or 2024-05-10 00:00:00.009930+00:00"


def parse_timestamp(text: str) -> tuple[int, bool]:
    """An Azure trace's TIMESTAMP as (integer nanoseconds since 1970-01-01 UTC, whether it
    has a UTC offset); a time without one is taken as UTC. The 2023 files write
    `2023-11-16 18:15:46.6805900`: 7 fractional digits, which datetime.fromisoformat refuses
    before Python 3.11; the 2024 ones `2024-05-10 00:00:00.009930+00:00`. Any 0 to 9
    fractional digits are kept exactly, in integers: seconds since 1970 as a float lose the
    7th digit. ValueError if `text` is not a valid date and time."""
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a date and time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"no such time of day: {text!r}")
    days = datetime.date(year, month, day).toordinal() - _EPOCH_DAY     # ValueError for 2023-02-30
    ns = (((days * 24 + hour) * 60 + minute) * 60 + second) * 10**9 + int((m[7] or "").ljust(9, "0"))
    zone = m[8]
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset_s = int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60
        ns -= offset_s * 10**9 if zone[0] == "+" else -offset_s * 10**9
    return ns, zone is not None


def _read_rows(path: pathlib.Path, adapters: int | None
               ) -> tuple[bool, list[tuple[Any, ...]], dict[int, tuple[int, int]]]:
    """(whether the file is in Azure's layout, rows, ranks the file gives) of the trace at
    `path`. Rows are (arrival_s, adapter label or None, prompt, output), sorted by arrival,
    ties in file order; the ranks map a label to (rank, line)."""
    def bad(line: int, what: str) -> NoReturn:
        raise ValueError(f"{path}: line {line}: {what}")

    def parse(line: int, column: str, text: str, convert: Callable[[str], Any], ok: Callable[[Any], bool],
              want: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            bad(line, f"{column} must be {want}, got {text!r}")
        return value

    layouts = f"{','.join(TRACE_COLUMNS)}[,rank] in any order, or Azure's {','.join(AZURE_COLUMNS)}"
    with path.open(newline="", encoding="utf-8-sig") as f:     # -sig: a spreadsheet's byte-order mark
        reader = csv.reader(f)
        first_row = next(reader, None)
        if first_row is None:
            bad(1, f"empty file; the header is {layouts}")
        header = [h.strip() for h in first_row]
        azure = sorted(header) == sorted(AZURE_COLUMNS)
        missing = [c for c in TRACE_COLUMNS if c not in header]
        unknown = [c for c in header if c not in TRACE_COLUMNS + ("rank",)]
        if not azure and (missing or unknown or len(set(header)) != len(header)):
            bad(1, f"the header must be {layouts} (missing {missing}, unknown {unknown}), "
                   f"got {','.join(header)!r}")
        rows: list[tuple[Any, ...]] = []
        file_ranks: dict[int, tuple[int, int]] = {}
        zoned: tuple[bool, int] | None = None
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                bad(line, f"{len(row)} fields, the header has {len(header)}")
            cell = dict(zip(header, (c.strip() for c in row), strict=True))
            if azure:
                try:
                    ns, has_offset = parse_timestamp(cell["TIMESTAMP"])
                except ValueError:
                    bad(line, f"TIMESTAMP must be {_TIMESTAMP_WANT}, got {cell['TIMESTAMP']!r}")
                zoned = zoned or (has_offset, line)
                if has_offset != zoned[0]:      # mixing them would shift some arrivals by the offset
                    bad(line, f"TIMESTAMP {cell['TIMESTAMP']!r} {'has' if has_offset else 'has no'} UTC offset, "
                              f"but line {zoned[1]}'s {'has none' if has_offset else 'has one'}")
                # a count of 0 is no malformed row: the run's context_overflow decides (fit_context)
                tokens = [parse(line, c, cell[c], int, lambda v: v >= 0, "an integer >= 0")
                          for c in AZURE_COLUMNS[1:]]
                rows.append((ns, None, *tokens))
                continue
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
    if azure:
        origin = min(r[0] for r in rows)
        rows = [((ns - origin) / 1e9, *rest) for ns, *rest in rows]
    rows.sort(key=lambda r: r[0])       # stable: ties keep the file's order
    return azure, rows, file_ranks


def _describe_popularity(cfg: WorkloadConfig) -> str:
    if cfg.popularity == "skewed":
        return f"skewed ({cfg.hot_share:g} of the requests to adapters 0..{cfg.hot_adapters - 1})"
    if cfg.popularity == "zipf":
        return f"zipf (alpha {cfg.zipf_alpha:g})"
    return "uniform"


def read_trace(path: str | pathlib.Path, seed: int = 0, rank_choices: Sequence[int] = DEFAULT_RANKS,
               adapters: int | None = None, requests: int | None = None,
               assign: WorkloadConfig | None = None) -> Workload:
    """The trace CSV at `path` in either layout (the module docstring): its first `requests`
    requests in arrival order (None: all of them; more than the file has is an error).

    This project's layout: with `adapters`, the ids must be below it and adapter i is id i,
    all `adapters` of them registered (what `write_trace` wrote from a generated workload
    reads back exactly); without it, the workload holds just the distinct ids of the
    requests taken, numbered 0..k-1 in id order, with the ids in `Workload.labels`.
    Azure's layout names no adapters: `assign` (a WorkloadConfig; default uniform) gives
    the popularity and its parameters and, unless `adapters` is given, how many adapters
    there are (default 1000); all of them are registered, as a generated workload's are.
    `seed` draws what the file does not give: the ranks and Azure's assignment."""
    path = pathlib.Path(path)
    azure, rows, file_ranks = _read_rows(path, adapters)
    if requests is not None:
        if not (_is_int(requests) and requests >= 1):
            raise ValueError(f"{path}: requests must be an integer >= 1, got {requests!r}")
        if requests > len(rows):
            raise ValueError(f"{path}: requests={requests}, but the trace has {len(rows)}")
        rows = rows[:requests]
    source = f"trace {path}"
    if azure:
        cfg = assign if assign is not None else WorkloadConfig(path.stem, trace=str(path))
        if adapters is not None:
            cfg = dataclasses.replace(cfg, adapters=adapters)
        picks = _pick_adapters(cfg, _streams(seed)[0], len(rows))    # generate's popularity stream
        rows = [(t, int(a), p, o) for (t, _, p, o), a in zip(rows, picks, strict=True)]
        labels = tuple(range(cfg.adapters))
        ranks = adapter_ranks(seed, cfg.adapters, rank_choices)
        source += (f" (Azure's {','.join(AZURE_COLUMNS)}); adapters assigned {_describe_popularity(cfg)} "
                   f"over {cfg.adapters}, seed {seed}")
    elif adapters is not None:
        labels = tuple(range(adapters))
        ranks = tuple(file_ranks[a][0] if a in file_ranks else adapter_rank(seed, a, rank_choices)
                      for a in labels)
    else:
        labels = tuple(sorted({r[1] for r in rows}))
        ranks = tuple(file_ranks[a][0] if a in file_ranks else adapter_rank(seed, a, rank_choices)
                      for a in labels)
        index = {label: i for i, label in enumerate(labels)}
        rows = [(t, index[a], p, o) for t, a, p, o in rows]
    taken = tuple(Request(i, *r) for i, r in enumerate(rows))
    return Workload(path.stem, tuple(ranks), taken, source, labels)


def write_trace(workload: Workload, path: str | pathlib.Path) -> None:
    """`workload` as a trace CSV with the rank column, adapters by label; `read_trace` gives
    the requests back."""
    with pathlib.Path(path).open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(TRACE_COLUMNS + ("rank",))
        for r in workload.requests:       # repr(float) reads back exactly
            writer.writerow((repr(r.arrival_s), workload.labels[r.adapter], r.prompt_tokens, r.output_tokens,
                             workload.ranks[r.adapter]))


def summary(workload: Workload, top: int = 50) -> dict[str, Any]:
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
        "busiest_adapter": workload.labels[int(np.argmax(counts))],
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


def unfit_requests(workload: Workload, max_context: int | None = None) -> list[Request]:
    """The requests no server runs as they are: a prompt or an output under 1 token, or
    (given `max_context`) a prompt + output over it."""
    return [r for r in workload.requests if r.prompt_tokens < 1 or r.output_tokens < 1
            or (max_context is not None and r.prompt_tokens + r.output_tokens > max_context)]


def fit_context(workload: Workload, max_context: int | None = None, mode: str = "refuse",
                model: str = "the model") -> tuple[Workload, int]:
    """`workload` made servable by a model of `max_context` tokens (None: no limit), and how
    many of its requests that changed. The `unfit_requests` are, by `mode`:
    - "refuse": none; ValueError naming how many and the first five;
    - "clip": shortened, the output first (down to 1 token), then the prompt; a count of 0
      becomes 1;
    - "drop": left out, as a server answers them with an error (vLLM refuses a request
      whose prompt and max_tokens exceed max_model_len) and serves the rest.
    Generated workloads clip to their config's max_context already; traces need this."""
    if mode not in CONTEXT_OVERFLOW:
        raise ValueError(f"context_overflow must be one of {CONTEXT_OVERFLOW}, got {mode!r}")
    unfit = unfit_requests(workload, max_context)
    if not unfit:
        return workload, 0
    if mode == "refuse":
        first = "; ".join(f"request {r.rid}: a {r.prompt_tokens + r.output_tokens}-token context "
                          f"({r.prompt_tokens} + {r.output_tokens})" for r in unfit[:5])
        more = f"; and {len(unfit) - 5} more" if len(unfit) > 5 else ""
        limit = f"{model}'s {max_context}-token context" if max_context is not None else model
        raise ValueError(f"{len(unfit)} of {len(workload.requests)} requests of {workload.name!r} do not fit "
                         f"{limit} (prompt + output, each at least 1 token): {first}{more}. Set "
                         f"context_overflow=clip to shorten them (the output first) or context_overflow=drop "
                         f"to leave them out")
    rids = {r.rid for r in unfit}
    if mode == "drop":
        requests = tuple(r for r in workload.requests if r.rid not in rids)
    else:
        def clip(r: Request) -> Request:
            prompt, output = max(1, r.prompt_tokens), max(1, r.output_tokens)
            if max_context is not None:
                output = max(1, min(output, max_context - prompt))
                prompt = min(prompt, max_context - output)
            return dataclasses.replace(r, prompt_tokens=prompt, output_tokens=output)
        requests = tuple(clip(r) if r.rid in rids else r for r in workload.requests)
    return dataclasses.replace(workload, requests=requests), len(unfit)

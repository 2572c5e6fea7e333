"""The crossover table (seed 000, Fig. 3a): which strategy is cheapest for one injected
weight of D x D at rank R, per GPU-memory state, as the batch grows.

- P1 (A and B cached): every strategy, none loads anything; E1 needs no link.
- P2 (nothing cached): E2 and E3 as they are; E1 and E4 only after loading their factors,
  charged by the scheduler's rule (`cost.amortized_load_s`: the load over the steps a batch
  is expected to last).
- P3 (B cached): E2, E3 and E4; E1 after loading A, by the same rule.

E3 and E4 send x (and y or m) over the link, B_i (D + D) or B_i (D + R) bytes, so they win at
small batches; E2 moves the adapter, R (D + D) bytes whatever B_i, so it wins at large ones.

`plora crossovers --csv PATH` writes every cost the table samples (write_csv), `--plot PATH`
draws them over the batch (plot_rows).
"""
from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .config import SchedulerConfig
from .cost import STRATEGIES, CostModel, Strategy, amortized_load_s, factor_bytes

if TYPE_CHECKING:
    from .device_timing import DeviceTiming

STATES = {"P1": frozenset("AB"), "P2": frozenset(), "P3": frozenset("B")}
RANKS = (8, 16, 32, 64, 128)
SHOWN_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FLIP_STEPS = (1, 2, 4)          # besides the config's expected_steps


@dataclasses.dataclass(frozen=True)
class Row:
    rank: int
    state: str
    strategy: Strategy
    loads: bool                 # charged the amortized load of factors the state lacks
    costs: tuple[float, ...]    # seconds at batch 1..max_batch


def rows_for(cost: CostModel, d: int, rank: int, expected_steps: float, max_batch: int,
             states: Iterable[str] = tuple(STATES), strategies: Iterable[Strategy] = STRATEGIES) -> list[Row]:
    out = []
    a_bytes, b_bytes = factor_bytes(d, d, rank)
    for state in states:
        held = STATES[state]
        for s in strategies:
            missing = s.gpu_parts - held
            load = amortized_load_s(cost.link, (a_bytes if "A" in missing else 0) + (b_bytes if "B" in missing else 0),
                                    expected_steps)
            costs = []
            for b in range(1, max_batch + 1):
                c = cost.lora_cost(s, b, d, d, rank)
                costs.append(c.total_s + load if c.feasible else float("inf"))
            out.append(Row(rank, state, s, bool(missing), tuple(costs)))
    return out


def best_runs(rows: Sequence[Row]) -> list[tuple[int, int, str]]:
    """[(first batch, last batch, strategy name)] of the cheapest row at each batch."""
    runs: list[tuple[int, int, str]] = []
    for i in range(len(rows[0].costs)):
        best = min(rows, key=lambda r: (r.costs[i], r.strategy.name))
        name = best.strategy.name + ("+load" if best.loads else "")
        if runs and runs[-1][2] == name:
            runs[-1] = (runs[-1][0], i + 1, name)
        else:
            runs.append((i + 1, i + 1, name))
    return runs


def first_cheaper(rows: Iterable[Row], cheaper: Strategy, than: Strategy) -> int | None:
    """The first batch at which strategy `cheaper` costs less than `than` in `rows` (one state)."""
    a = next(r for r in rows if r.strategy is cheaper)
    b = next(r for r in rows if r.strategy is than)
    return next((i + 1 for i, (x, y) in enumerate(zip(a.costs, b.costs, strict=True)) if x < y), None)


def crossovers(config: SchedulerConfig, timing: DeviceTiming, out: Callable[[str], object] = print, d: int = 4096,
               ranks: Iterable[int] = RANKS, max_batch: int = 256, rows_out: list[Row] | None = None
               ) -> dict[int, tuple[int | None, int | None]]:
    """Print the table per rank (costs at SHOWN_BATCHES, the cheapest runs, the crossovers)
    and its last line; returns {rank: (E2 beats E3 from, E2 beats E4 from)}. `rows_out`, a
    list, gets every Row printed (costs at every batch 1..max_batch)."""
    cost = CostModel(config.gpu_config(), config.link_config(), timing, config.num_devices)
    link = config.link_config()
    out(f"crossovers: one injected weight, D = {d}, on {config.device!r} devices over {link.name!r} "
        f"({link.bytes_per_s / 1e9:g} GB/s, L_link {link.round_trip_s * 1e9:g} ns), GPU {config.gpu!r}; "
        f"costs in us per layer; '+load' = the factors the state lacks loaded once and charged over "
        f"expected_steps = {config.expected_steps:g} steps")
    printed = 0
    summary: dict[int, tuple[int | None, int | None]] = {}
    for rank in ranks:
        rows = rows_for(cost, d, rank, config.expected_steps, max_batch)
        out(f"\nR = {rank}")
        out(f"  {'state':<5} {'strategy':<8} "
            + " ".join(f"{'B=' + str(b):>9}" for b in SHOWN_BATCHES if b <= max_batch))
        for r in rows:
            name = r.strategy.name + ("+load" if r.loads else "")
            cells = " ".join(f"{r.costs[b - 1] * 1e6:>9.2f}" if r.costs[b - 1] != float("inf") else f"{'-':>9}"
                             for b in SHOWN_BATCHES if b <= max_batch)
            out(f"  {r.state:<5} {name:<8} {cells}")
            printed += 1
        if rows_out is not None:
            rows_out.extend(rows)
        for state in STATES:
            mine = [r for r in rows if r.state == state]
            as_is = [r for r in mine if not r.loads]
            runs = " | ".join(f"{name} {lo}-{hi}" for lo, hi, name in best_runs(as_is))
            out(f"  {state} best without loads: {runs}")
            if any(r.loads for r in mine):
                runs = " | ".join(f"{name} {lo}-{hi}" for lo, hi, name in best_runs(mine))
                out(f"  {state} best with the load rule: {runs}")
        p2 = [r for r in rows if r.state == "P2" and not r.loads]
        p3 = [r for r in rows if r.state == "P3" and not r.loads]
        summary[rank] = (first_cheaper(p2, Strategy.E2, Strategy.E3), first_cheaper(p3, Strategy.E2, Strategy.E4))
        flips = []
        for steps in sorted({*FLIP_STEPS, config.expected_steps}):
            rule = rows_for(cost, d, rank, steps, max_batch, states=("P3",), strategies=(Strategy.E1, Strategy.E4))
            flips.append(f"{first_cheaper(rule, Strategy.E1, Strategy.E4)} if it lasts {steps:g} steps")
        out(f"  E2 beats E3 from batch {summary[rank][0]}, E4 from batch {summary[rank][1]}")
        out("  the load rule moves a P3 adapter to P1 (E4 -> E1, loading A) from batch " + ", ".join(flips))
    e3, e4 = summary.get(16, (None, None))
    out(f"crossovers n={printed} e3_to_e2_at_R16={e3} e4_to_e2_at_R16={e4}")
    return summary


# ---- the table as data: CSV and a plot (plora crossovers --csv, --plot) ----------------------

CSV_COLUMNS = ("rank", "state", "strategy", "charged_load", "d_model", "batch_count", "cost_us")
HELD = {"P1": "A and B cached", "P2": "nothing cached", "P3": "B cached"}


def label(row: Row) -> str:
    """The strategy as the table prints it: 'E1+load' where the state's missing factors are
    loaded and charged by the load rule."""
    return row.strategy.name + ("+load" if row.loads else "")


def write_csv(rows: Iterable[Row], path: str | pathlib.Path, d: int) -> pathlib.Path:
    """Every cost of `rows` as CSV, a line per (rank, state, strategy, batch) in the table's
    order, batch 1..max_batch: `cost_us` is one injected weight's cost per layer in
    microseconds (empty where the strategy cannot run), `charged_load` whether it includes the
    amortized load of the factors the state lacks (the table's '+load'), `d_model` the
    weight's dimension D."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            for b, cost in enumerate(r.costs, start=1):
                w.writerow((r.rank, r.state, label(r), r.loads, d, b,
                            "" if math.isinf(cost) else repr(float(cost) * 1e6)))
    return path


def plot_rows(rows: Sequence[Row], path: str | pathlib.Path, d: int, config: SchedulerConfig | None = None
              ) -> pathlib.Path:
    """The costs of `rows` over the batch, log-log: a panel per state (rows of panels) and
    rank (columns), a line per strategy (dashed where it is charged a load), one legend
    right of the panels. Returns the path written (its format from its suffix)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    from matplotlib.lines import Line2D

    ranks = list(dict.fromkeys(r.rank for r in rows))
    states = list(dict.fromkeys(r.state for r in rows))
    colors = {s.name: c for s, c in zip(STRATEGIES, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False)}
    fig, axes = plt.subplots(len(states), len(ranks), figsize=(2.7 * len(ranks) + 1.8, 2.3 * len(states) + 0.8),
                             sharex=True, sharey=True, squeeze=False)
    for i, state in enumerate(states):
        for j, rank in enumerate(ranks):
            ax = axes[i][j]
            for r in rows:
                if r.state != state or r.rank != rank:
                    continue
                batches = range(1, len(r.costs) + 1)
                ax.plot(batches, [c * 1e6 if not math.isinf(c) else math.nan for c in r.costs],
                        color=colors[r.strategy.name], ls="--" if r.loads else "-", lw=1.2)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_yscale("log")
            ax.grid(True, which="major", lw=0.3, alpha=0.5)
            if i == 0:
                ax.set_title(f"R = {rank}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{state}: {HELD.get(state, state)}\ncost (us per layer)", fontsize=8)
            if i == len(states) - 1:
                ax.set_xlabel("batch (requests)", fontsize=8)
            ax.tick_params(labelsize=7)
    handles = [Line2D([], [], color=colors[s.name], label=s.name) for s in STRATEGIES]
    handles.append(Line2D([], [], color="gray", ls="--", label="+load: the\nmissing factors'\nload, amortized"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1 - 1.7 / fig.get_figwidth(), 0.5),
               fontsize=8, frameon=False, title="strategy", title_fontsize=8)
    where = ""
    if config is not None:
        link = config.link_config()
        where = f", {config.device} devices over {link.name} ({link.bytes_per_s / 1e9:g} GB/s), GPU {config.gpu}"
    fig.suptitle(f"Cost of one injected {d} x {d} weight per layer by strategy and GPU-memory state{where}; "
                 "lower is better", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 1.8 / fig.get_figwidth(), 0.96))
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

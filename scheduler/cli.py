"""`plora`: the scheduler's command line.

    plora crossovers [--config default]      Fig. 3a's crossover table (make crossovers);
                     [--csv PATH --plot PATH]  the costs as CSV, and a plot
    plora steps [--steps 5 --adapters 200]   drive the scheduler by hand on a random batch
                                             and print why it chose what it chose, then a
                                             summary (--summary: the summary alone)
    plora timing-check [--config paper]      the device-timing table against the model

Bad input is a click usage error (exit status 2): an option out of range, an image format
matplotlib does not write, more adapters than the config's max_cpu_loras; `plora` (plora_cli/)
prints it as one `Error:` line.
"""
from __future__ import annotations

import collections
import os
import pathlib
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

import isa
from isa.config import parse_overrides

from .config import SchedulerConfig, load_scheduler_config

if TYPE_CHECKING:
    from .entities import StepPlan

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


def config_from(loader: Callable[..., _T], name: str | pathlib.Path, overrides: Iterable[str],
                what: str = "KNOB") -> _T:
    """`loader(name, **KEY=VALUE overrides)`, its errors as click's (one for every CLI)."""
    try:
        changes = parse_overrides(overrides, what)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    try:
        return loader(name, **changes)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None


def _config(name: str, overrides: Iterable[str]) -> SchedulerConfig:
    return config_from(load_scheduler_config, name, overrides)


config_option = click.option("--config", "config_name", default="default", show_default=True,
                             help="scheduler config: a name in scheduler/configs or a JSON path")
set_option = click.option("--set", "overrides", multiple=True, metavar="KNOB=VALUE",
                          help="override a knob of the config (repeatable)")


@click.group()
def main() -> None:
    """PLoRA's host-side scheduler over a pool of NDP devices."""


def writable_path(value: pathlib.Path | None, option: str) -> pathlib.Path | None:
    """`value` (a pathlib.Path or None) if a file can be written there (its folder exists and
    is writable, or can be made), else a usage error naming `option`: checked before any work."""
    if value is None:
        return None
    folder = value.parent.absolute()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise click.BadParameter(f"{str(value)!r}: {str(folder)!r} is a file, not a folder", param_hint=option)
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"{str(value)!r}: cannot write in {str(folder)!r}", param_hint=option)
    return value


def figure_path(value: pathlib.Path | None, option: str) -> pathlib.Path | None:
    """`value` (a pathlib.Path or None) if matplotlib can write its format there, else a usage
    error naming `option` and the formats it can."""
    if value is None or writable_path(value, option) is None:
        return None
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = value.suffix.lower().lstrip(".")
    if suffix not in formats:
        what = f"unknown image format {suffix!r}" if suffix else "no file extension to name its image format"
        raise click.BadParameter(f"{str(value)!r}: {what}; the formats: .{', .'.join(sorted(formats))}",
                                 param_hint=option)
    return value


def figure_option(help_text: str) -> Callable[[_F], _F]:
    return click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=pathlib.Path),
                        default=None, metavar="PATH",
                        callback=lambda ctx, param, value: figure_path(value, "--plot"), help=help_text)


def csv_option(help_text: str) -> Callable[[_F], _F]:
    return click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=pathlib.Path),
                        default=None, metavar="PATH",
                        callback=lambda ctx, param, value: writable_path(value, "--csv"), help=help_text)


@main.command()
@config_option
@set_option
@click.option("--d", default=4096, show_default=True, type=click.IntRange(min=1),
              help="model dimension of the injected weight")
@click.option("--max-batch", default=256, show_default=True, type=click.IntRange(min=1))
@csv_option("write every cost (each rank, state, strategy and batch 1..max-batch, us) as CSV here")
@figure_option("plot the costs over the batch (a panel per rank and state) to this image (.png, .pdf, .svg)")
def crossovers(config_name: str, overrides: tuple[str, ...], d: int, max_batch: int, csv_path: pathlib.Path | None,
               plot_path: pathlib.Path | None) -> None:
    """Cost of each strategy per GPU-memory state over batch 1..max-batch, and where the best changes."""
    from .crossovers import crossovers as run
    from .crossovers import plot_rows, write_csv
    from .device_timing import DeviceTiming
    config = _config(config_name, overrides)
    rows: list[Any] = []
    run(config, DeviceTiming(config.device_config()), d=d, max_batch=max_batch, out=click.echo, rows_out=rows)
    if csv_path:
        click.echo(f"wrote {write_csv(rows, csv_path, d)}")
    if plot_path:
        click.echo(f"wrote {plot_rows(rows, plot_path, d, config)}")


STEP_RANKS = (8, 16, 32, 64, 128)       # the ranks `plora steps` draws its adapters' from


def run_steps(config: SchedulerConfig, steps: int, adapters: int, batch: int, skew: float, seed: int
              ) -> Iterator[StepPlan]:
    """The scheduler on a random churning batch: yields each step's StepPlan. Each step, a
    live request leaves with probability 0.1 and the rest grow by one token; new requests
    fill the batch, a share `skew` of them to the 50 most popular adapters."""
    from .scheduler import Request, Scheduler
    rng = random.Random(seed)
    sched = Scheduler(config)
    for a in range(adapters):
        sched.register(a, rng.choice([r for r in STEP_RANKS if r <= config.max_lora_rank]))
    live: list[tuple[int, int, int, bool]] = []
    next_rid = 0
    for _ in range(steps):
        live = [(rid, a, ctx + 1, False) for rid, a, ctx, _ in live if rng.random() > 0.1]
        while len(live) < batch:
            a = rng.randrange(min(50, adapters)) if rng.random() < skew else rng.randrange(adapters)
            live.append((next_rid, a, rng.randint(64, 2048), True))
            next_rid += 1
        yield sched.step([Request(rid, a, ctx, new) for rid, a, ctx, new in live])


STRATEGY_NAMES = ("E1", "E2", "E3", "E4")


def step_totals(plan: StepPlan) -> dict[str, Any]:
    """One step's totals: sites, the strategy mix, the chosen candidates' costs summed (each
    site's `= ... us` on its chosen line of the detail, all layers), the loads and evictions,
    the GPU memory used and the KV share duplicated."""
    mix = plan.strategy_mix()
    return {"step": plan.step, "sites": len(plan.decisions), **{s: mix.get(s, 0) for s in STRATEGY_NAMES},
            "chosen_us": sum(d.chosen.total_s for d in plan.decisions.values()) * 1e6,
            "loads": len(plan.loads), "load_mb": sum(nbytes for _, _, nbytes in plan.loads) / 1e6,
            "evictions": len(plan.evictions), "gpu_gb": plan.used_bytes / 1e9,
            "budget_gb": plan.budget_bytes / 1e9, "kv_dup": plan.p_kv}


def step_line(t: dict[str, Any]) -> str:
    return (f"step {t['step']}: {t['sites']} sites (" + ", ".join(f"{s} {t[s]}" for s in STRATEGY_NAMES)
            + f"), chosen costs {t['chosen_us']:.2f} us, {t['loads']} loads ({t['load_mb']:.1f} MB), "
            f"{t['evictions']} evictions, GPU {t['gpu_gb']:.3f} of {t['budget_gb']:.3f} GB, "
            f"KV duplicated {t['kv_dup']:.3f}")


def summary_line(totals: Sequence[dict[str, Any]]) -> str:
    """The last line of `plora steps`: sums over its steps."""
    total: collections.Counter[str] = collections.Counter()
    for t in totals:
        total.update({k: t[k] for k in ("sites", *STRATEGY_NAMES, "chosen_us", "loads", "evictions")})
    return (f"steps n={len(totals)} sites={total['sites']} " + " ".join(f"{s}={total[s]}" for s in STRATEGY_NAMES)
            + f" chosen_us={total['chosen_us']:.2f} loads={total['loads']} evictions={total['evictions']}")


@main.command()
@config_option
@set_option
@click.option("--steps", default=5, show_default=True, type=click.IntRange(min=1))
@click.option("--adapters", default=200, show_default=True, type=click.IntRange(min=1),
              help="registered adapters (at most the config's max_cpu_loras)")
@click.option("--batch", default=64, show_default=True, type=click.IntRange(min=1), help="requests per step")
@click.option("--skew", default=0.8, show_default=True, type=click.FloatRange(0, 1),
              help="share of requests to the 50 most popular adapters")
@click.option("--seed", default=0, show_default=True)
@click.option("--summary", "summary_only", is_flag=True,
              help="print only the summary: a line per step (its totals) and a last line over all steps")
def steps(config_name: str, overrides: tuple[str, ...], steps: int, adapters: int, batch: int, skew: float,
          seed: int, summary_only: bool) -> None:
    """Run the scheduler on a random churning batch and explain every decision; a summary
    (a line per step and a last line) follows, or alone with --summary."""
    from .scheduler import SchedulerError
    config = _config(config_name, overrides)
    if adapters > config.max_cpu_loras:
        raise click.BadParameter(f"{adapters} adapters exceed the config's max_cpu_loras={config.max_cpu_loras}",
                                 param_hint="--adapters")
    if config.max_lora_rank < STEP_RANKS[0]:
        raise click.BadParameter(f"max_lora_rank={config.max_lora_rank}: plora steps draws ranks from "
                                 f"{', '.join(map(str, STEP_RANKS))}; give {STEP_RANKS[0]} or more",
                                 param_hint="--set")
    if min(batch, adapters) > config.max_loras_per_batch:
        raise click.BadParameter(f"a batch of {batch} requests over {adapters} adapters can hold "
                                 f"{min(batch, adapters)} distinct adapters, more than the config's "
                                 f"max_loras_per_batch={config.max_loras_per_batch}", param_hint="--batch")
    totals = []
    try:
        for plan in run_steps(config, steps, adapters, batch, skew, seed):
            if not summary_only:
                click.echo(plan.explain())
                click.echo()
            totals.append(step_totals(plan))
    except SchedulerError as exc:
        raise click.BadParameter(f"{exc} (--batch {batch}, --adapters {adapters})", param_hint="--batch") from None
    if not summary_only:
        click.echo("summary:")
    for t in totals:
        click.echo(step_line(t))
    click.echo(summary_line(totals))


@main.command("timing-check")
@click.option("--config", "device", default="paper", show_default=True, help="device config")
@click.option("--samples", default=40, show_default=True)
@click.option("--seed", default=1, show_default=True)
def timing_check(device: str, samples: int, seed: int) -> None:
    """The device-timing table against direct runs of the cycle model on random shapes."""
    from .device_timing import check
    check(isa.load_config(device), samples, seed, out=click.echo)


if __name__ == "__main__":
    main()

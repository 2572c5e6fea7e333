"""The serving simulator's commands (serving/): simulate, sweep, reproduce, serve-bench,
replay-step, systems."""
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import click

import scheduler.cli as scheduler_cli
from isa.config import parse_value
from serving.config import load_system_config, system_names

from .app import BadInput, main, out_folder, run_files, serving_config

config_option = click.option("--config", "config_name", default="default", show_default=True,
                             help="run config: a name in serving/configs/runs or a JSON path")
set_option = click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
                          help="override a field of the run config (repeatable), e.g. system=ns, requests=200")


def _trace_path(value: pathlib.Path | None) -> pathlib.Path | None:
    """--trace: a file that can be written, its folder made now, so that a bad path fails
    before the run rather than after it."""
    value = scheduler_cli.writable_path(value, "--trace")
    if value is not None:
        try:
            value.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(f"{str(value)!r}: {exc.strerror}", param_hint="--trace") from None
    return value


def _trace_steps(value: str) -> range | None:
    """--trace-steps as serving.trace.parse_steps reads it; a bad one a usage error."""
    from serving.trace import parse_steps
    try:
        return parse_steps(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--trace-steps") from None


def _shared(rows: Sequence[Mapping[str, Any]]) -> str:
    """What every row of a sweep shares: system, model, workload, then the hardware."""
    from serving.figures import setup_text
    names = [f"{k} {rows[0][k]}" for k in ("system", "model", "workload") if len({str(r[k]) for r in rows}) == 1]
    return ", ".join(names + [setup_text(rows)]) or "nothing"


def _echo_summary(summary: Mapping[str, Any]) -> None:
    from serving.results import summary_lines
    for line in summary_lines(summary):
        click.echo(line)


@main.command()
@config_option
@set_option
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              callback=out_folder, help="write steps.csv, requests.csv and summary.json here")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=pathlib.Path), default=None,
              callback=lambda ctx, param, value: _trace_path(value),
              help="write the run's timeline here as a Chrome/Perfetto trace (JSON; GPU, link and each "
                   "device as tracks; open it in ui.perfetto.dev)")
@click.option("--trace-steps", default="0:50", show_default=True, metavar="A:B|N|all",
              callback=lambda ctx, param, value: _trace_steps(value),
              help="the steps the trace details by layer and round (every step is on its steps track)")
def simulate(config_name: str, overrides: tuple[str, ...], out: pathlib.Path | None, trace_path: pathlib.Path | None,
             trace_steps: range | None) -> None:
    """Serve one workload on one system and print the summary (and, with --trace, write its
    timeline)."""
    from serving.engine import ServingError, run
    from serving.results import json_summary
    from serving.trace import Timeline
    cfg = serving_config(config_name, overrides)
    timeline = Timeline(trace_steps) if trace_path else None
    try:
        result = run(cfg, on_step=timeline)
    except (ServingError, ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    summary = result.summary()
    _echo_summary(summary)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        result.write_steps_csv(out / "steps.csv")
        result.write_requests_csv(out / "requests.csv")
        (out / "summary.json").write_text(json.dumps(json_summary(summary), indent=1) + "\n")
        click.echo(f"wrote {out}/steps.csv, requests.csv, summary.json")
    if timeline is not None and trace_path is not None:       # the one is made when the other is given
        try:
            timeline.write(trace_path)
        except OSError as exc:
            raise click.ClickException(f"--trace {trace_path}: {exc.strerror}") from None
        click.echo(f"wrote {trace_path} (Chrome/Perfetto trace: {len(timeline.events)} events, "
                   f"steps {'all' if trace_steps is None else f'{trace_steps.start}:{trace_steps.stop}'} "
                   f"by layer)")


@main.command()
@config_option
@set_option
@click.option("--axis", "axes", multiple=True, required=True, metavar="NAME=V1,V2,...",
              help="a sweep axis: link_gb_s, latency_ns, devices, batch or any run config field (repeatable)")
@click.option("--address", default=None, help="a Dask scheduler's address; default: a local cluster")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="local cluster workers (default: one per core)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=pathlib.Path), default="build/sweep.csv",
              show_default=True, callback=lambda ctx, param, value: scheduler_cli.writable_path(value, "--out"))
@scheduler_cli.figure_option("plot throughput, TPOT and link utilization over the first numeric axis, a line "
                             "per value of the others, to this image (.png, .pdf, .svg)")
def sweep(config_name: str, overrides: tuple[str, ...], axes: tuple[str, ...], address: str | None, workers: int | None,
          out: pathlib.Path, plot_path: pathlib.Path | None) -> None:
    """Run a grid of configs (in parallel on Dask) and write one CSV row per point (and a plot)."""
    from serving.sweep import points, write_csv
    from serving.sweep import sweep as run_sweep
    base = serving_config(config_name, overrides)
    grid = {}
    for item in axes:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise BadInput(f"--axis: expected NAME=V1,V2,..., got {item!r}")
        grid[name] = [parse_value(v) for v in values.split(",")]
    try:
        labelled = points(base, grid)
    except ValueError as exc:
        raise BadInput(f"--axis: {exc}") from None
    for _, cfg in labelled:
        run_files(cfg)             # a point naming a config that does not load fails here, not in a worker
    rows = run_sweep([cfg for _, cfg in labelled], address=address, workers=workers)
    rows = [dict(summary, **{f"axis_{k}": v for k, v in labels.items()})
            for (labels, _), summary in zip(labelled, rows, strict=True)]
    write_csv(rows, out)
    for row in rows:
        axes_text = " ".join(f"{k[5:]}={v}" for k, v in row.items() if k.startswith("axis_"))
        click.echo(f"{axes_text:40s} tok/s {row['throughput_tok_s']:9.1f}  tpot {row['tpot_ms']:8.2f} ms  "
                   f"link {row['link_util']:.2f}")
    click.echo(f"every point: {_shared(rows)}")
    click.echo(f"wrote {out}")
    if plot_path:
        from serving.figures import sweep_plot
        click.echo(f"wrote {sweep_plot(rows, list(grid), plot_path)}")


@main.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default="build/reproduce",
              show_default=True)
@click.option("--requests", default=128, show_default=True, type=click.IntRange(min=1),
              help="requests per run (offline; at least the batch, max_batch: 32)")
@click.option("--address", default=None, help="a Dask scheduler's address; default: a local cluster")
@click.option("--workers", default=None, type=click.IntRange(min=1))
@click.option("--reuse", is_flag=True, help="read the sweeps' CSVs from --out if they exist (figures, table only)")
@set_option
def reproduce(out: pathlib.Path, requests: int, address: str | None, workers: int | None, reuse: bool,
              overrides: tuple[str, ...]) -> None:
    """The paper's claims (sections VII-D, VIII) beside the simulator's, CSVs and figures in
    --out; the table fits 120 columns, each claim's whole cause and note in --out/claims.csv."""
    from serving.reproduce import ReproduceError, check_requests, reusable
    from serving.reproduce import reproduce as run_reproduce
    base = serving_config("default", overrides)
    if not (reuse and reusable(out)):
        problem = check_requests(requests, base.max_batch)
        if problem:
            raise BadInput(f"--requests {requests}: {problem}")
    try:
        scheduler_cli.writable_path(out / "claims.csv", "--out")
    except click.BadParameter as exc:
        raise BadInput(f"--out {out}: {exc.format_message()}") from None
    out.mkdir(parents=True, exist_ok=True)
    try:
        run_reproduce(out, requests=requests, address=address, workers=workers, echo=click.echo, reuse=reuse,
                      base=base)
    except ReproduceError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("serve-bench")
@click.option("--config", "config_name", default="serve-bench", show_default=True)
@set_option
def serve_bench(config_name: str, overrides: tuple[str, ...]) -> None:
    """Simulation speed on a 10,000-request trace (one core)."""
    from serving.engine import run
    cfg = serving_config(config_name, overrides)
    result = run(cfg)
    s = result.summary()
    click.echo(f"simulated {s['sim_s']:.1f} s of serving: {s['system']}, {s['model']} on {s['gpu']}, "
               f"{s['link']} to {s['num_devices']} x {s['device']}")
    click.echo(f"{s['throughput_tok_s']:.0f} tok/s, {s['throughput_req_s']:.2f} req/s, "
               f"TPOT {s['tpot_ms']:.2f} ms (p99 {s['tpot_p99_ms']:.2f}), TTFT {s['ttft_s']:.3f} s "
               f"(p99 {s['ttft_p99_s']:.3f}), end-to-end {s['e2e_latency_s']:.3f} s (p99 {s['e2e_latency_p99_s']:.3f})")
    click.echo(f"serving requests={s['requests']} steps={s['steps']} wall_s={result.wall_s:.1f} "
               f"steps_per_s={s['steps'] / result.wall_s:.0f}")


@main.command("replay-step")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="a case to replay (repeatable; default all): " + ", ".join(
                  ("llama2-7b-short", "llama2-7b-long", "llama3-8b", "qwen3-30b-a3b", "mixed-e1-e4")))
def replay_step(cases: tuple[str, ...]) -> None:
    """Replay whole decode steps descriptor by descriptor on model devices and the link, and
    compare their pool side with what the serving simulator charged."""
    from serving.replay_step import CASES
    from serving.replay_step import main as run_replay
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise BadInput(f"--case: unknown case {unknown[0]!r}; the cases: {', '.join(CASES)}")
    run_replay(list(cases) or None, out=click.echo)


@main.command()
def systems() -> None:
    """The systems a run can name, and what each models."""
    for name in system_names():
        click.echo(f"{name:18s} {load_system_config(name).description}")

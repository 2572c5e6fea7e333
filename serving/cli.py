"""`plora`: the project's command line, the scheduler's commands and the serving simulator's.

    plora simulate [--config default] [--set system=ns ...]   one run: summary, CSVs
    plora sweep --axis link_gb_s=8,16,... [--address tcp://...]  a grid of runs on Dask
    plora reproduce [--out build/reproduce]                    the paper's claims (make reproduce)
    plora serve-bench                                          the simulator's speed (make serve-bench)
    plora replay-step [--case llama2-7b-short ...]             whole steps on model devices vs the charge (make replay-step)
    plora systems                                              the systems and what each models
    plora crossovers | steps | timing-check                    the scheduler's (scheduler/cli.py)
    plora area [--config paper]                                the core's area, power, timing (make area)
"""
import json
import pathlib

import click

from isa.config import parse_value
from scheduler.cli import config_from, main

from .config import load_serving_config, load_system_config, system_names


def _serving_config(name, overrides):
    return config_from(load_serving_config, name, overrides, "FIELD")


config_option = click.option("--config", "config_name", default="default", show_default=True,
                             help="run config: a name in serving/configs/runs or a JSON path")
set_option = click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
                          help="override a field of the run config (repeatable), e.g. system=ns, requests=200")


def _echo_summary(summary):
    from .results import summary_lines
    for line in summary_lines(summary):
        click.echo(line)


@main.command()
@config_option
@set_option
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              help="write steps.csv, requests.csv and summary.json here")
def simulate(config_name, overrides, out):
    """Serve one workload on one system and print the summary."""
    from .engine import ServingError, run
    from .results import json_summary
    cfg = _serving_config(config_name, overrides)
    try:
        result = run(cfg)
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


@main.command()
@config_option
@set_option
@click.option("--axis", "axes", multiple=True, required=True, metavar="NAME=V1,V2,...",
              help="a sweep axis: link_gb_s, latency_ns, devices, batch or any run config field (repeatable)")
@click.option("--address", default=None, help="a Dask scheduler's address; default: a local cluster")
@click.option("--workers", default=None, type=int, help="local cluster workers (default: one per core)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=pathlib.Path), default="build/sweep.csv",
              show_default=True)
def sweep(config_name, overrides, axes, address, workers, out):
    """Run a grid of configs (in parallel on Dask) and write one CSV row per point."""
    from .sweep import points, sweep as run_sweep, write_csv
    base = _serving_config(config_name, overrides)
    grid = {}
    for item in axes:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise click.BadParameter(f"expected NAME=V1,V2,..., got {item!r}", param_hint="--axis")
        grid[name] = [parse_value(v) for v in values.split(",")]
    try:
        labelled = points(base, grid)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    rows = run_sweep([cfg for _, cfg in labelled], address=address, workers=workers)
    rows = [dict(summary, **{f"axis_{k}": v for k, v in labels.items()}) for (labels, _), summary in zip(labelled, rows)]
    write_csv(rows, out)
    for row in rows:
        axes_text = " ".join(f"{k[5:]}={v}" for k, v in row.items() if k.startswith("axis_"))
        click.echo(f"{axes_text:40s} tok/s {row['throughput_tok_s']:9.1f}  tpot {row['tpot_ms']:8.2f} ms  "
                   f"link {row['link_util']:.2f}")
    click.echo(f"wrote {out}")


@main.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default="build/reproduce",
              show_default=True)
@click.option("--requests", default=128, show_default=True, help="requests per run (batch 32, offline)")
@click.option("--address", default=None, help="a Dask scheduler's address; default: a local cluster")
@click.option("--workers", default=None, type=int)
@click.option("--reuse", is_flag=True, help="read the sweeps' CSVs from --out if they exist (figures, table only)")
@set_option
def reproduce(out, requests, address, workers, reuse, overrides):
    """The paper's claims (sections VII-D, VIII) beside the simulator's, CSVs and figures in --out."""
    from .reproduce import reproduce as run_reproduce
    out.mkdir(parents=True, exist_ok=True)
    run_reproduce(out, requests=requests, address=address, workers=workers, echo=click.echo, reuse=reuse,
                  base=_serving_config("default", overrides))


@main.command("serve-bench")
@click.option("--config", "config_name", default="serve-bench", show_default=True)
@set_option
def serve_bench(config_name, overrides):
    """Simulation speed on a 10,000-request trace (one core)."""
    from .engine import run
    cfg = _serving_config(config_name, overrides)
    result = run(cfg)
    s = result.summary()
    click.echo(f"simulated {s['sim_s']:.1f} s of serving: {s['throughput_tok_s']:.0f} tok/s, TPOT {s['tpot_ms']:.2f} ms, "
               f"TTFT {s['ttft_s']:.3f} s")
    click.echo(f"serving requests={s['requests']} steps={s['steps']} wall_s={result.wall_s:.1f} "
               f"steps_per_s={s['steps'] / result.wall_s:.0f}")


@main.command("replay-step")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="a case to replay (repeatable; default all): " + ", ".join(
                  ("llama2-7b-short", "llama2-7b-long", "llama3-8b", "qwen3-30b-a3b", "mixed-e1-e4")))
def replay_step(cases):
    """Replay whole decode steps descriptor by descriptor on model devices and the link, and
    compare their pool side with what the serving simulator charged."""
    from .replay_step import CASES, main as run_replay
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise click.BadParameter(f"unknown case {unknown[0]!r}; the cases: {', '.join(CASES)}", param_hint="--case")
    run_replay(list(cases) or None, out=click.echo)


@main.command()
def systems():
    """The systems a run can name, and what each models."""
    for name in system_names():
        click.echo(f"{name:18s} {load_system_config(name).description}")


@main.command()
@click.option("--config", "config_name", default="default", show_default=True,
              help="device config: a name in isa/configs or a JSON path")
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              help="where report-<config>.json and .md go (default build/area)")
@click.option("--scaling", is_flag=True,
              help="each block's growth over the 1 and 2 channel variants a scaled config is fitted to, "
                   "and the lane-wide blocks alone at 1, 2 and 4 channels")
def area(config_name, out, scaling):
    """Area, power and timing of the NDP core at 45 nm beside the paper's (area/report.py)."""
    from area import blocks, report
    try:
        if scaling:
            blocks.main(["--config", config_name, "--scaling"])
        else:
            report.run(config_name, **({"out_dir": out} if out else {}), echo=click.echo)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--config", "config_name", default="default", show_default=True, help="device config")
def verify(config_name):
    """The verification environment at full size: coverage goals, faults, fuzzing, resets,
    the soak (verify/cli.py); the last line sums it up."""
    from verify.cli import main as verify_main
    verify_main(config_name, echo=click.echo)



# ---- the RTL tools (rtlbench/): Verilator builds and cocotb runs -----------------------

PASS_THROUGH = {"ignore_unknown_options": True, "help_option_names": []}


@main.command()
def demo():
    """A GEMV and a GEMM through the driver on the RTL (Verilator), against numpy."""
    from rtlbench import demo as rtl_demo
    if rtl_demo.main():
        raise SystemExit(1)         # a failed build or run: make demo fails with it


@main.command(context_settings=PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def validate(args):
    """The cycle model against the RTL on a random descriptor stream (rtlbench/validate.py;
    --help there)."""
    from rtlbench import validate as rtl_validate
    rtl_validate.main(list(args))


@main.command(context_settings=PASS_THROUGH)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def roofline(args):
    """PE-array and DRAM-port utilization of back-to-back descriptors, RTL and model
    (rtlbench/roofline.py; --help there)."""
    from rtlbench import roofline as rtl_roofline
    rtl_roofline.main(list(args))


@main.command()
@click.option("--config", "config_name", default="default", show_default=True, help="device config")
def bench(config_name):
    """Simulation speed of the model, the fast RTL path and the cocotbext-axi bench on one stream."""
    from rtlbench import bench as rtl_bench
    rtl_bench.main(config_name)

if __name__ == "__main__":
    main()

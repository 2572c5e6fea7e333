"""`plora`: the project's one command line (click throughout).

    plora simulate [--config default] [--set system=ns ...] [--trace F]  one run: summary, CSVs, timeline
    plora sweep --axis link_gb_s=8,16,... [--address tcp://...] [--plot PATH]  a grid of runs on Dask
    plora reproduce [--out build/reproduce]                    the paper's claims (make reproduce)
    plora serve-bench                                          the simulator's speed (make serve-bench)
    plora replay-step [--case llama2-7b-short ...]             whole steps on model devices vs the charge (make replay-step)
    plora systems                                              the systems and what each models
    plora boost [--requests 2000]                              BOOST's claims and its use in the pool (make boost)
    plora crossovers | steps | timing-check                    the scheduler's (scheduler/cli.py)
    plora area [--config paper]                                the core's area, power, timing (make area)
    plora demo | validate | roofline | bench | verify          the RTL's (rtlbench/, verify/)

Bad input (a config that does not exist, malformed JSON, a JSON value that is not an
object, an unknown field or `--set` field, a value of the wrong type or out of range) is one
line, `Error: <what>` naming the file and the field, and exit status 2, click's status for
a usage error, checked before any work starts. The loaders raise `isa.config.ConfigError`
(a ValueError) for these; `PloraGroup` turns any that escapes into the same line, and a
subcommand's click usage error (an unknown option, `--count abc`) too: one `Error:` line
naming the command's --help, exit status 2. A run that fails once started (a trace over
the model's context, a failed synthesis) is `Error:` with exit status 1.
"""
import copy
import functools
import importlib.metadata
import json
import pathlib

import click

import scheduler.cli as scheduler_cli
from isa.config import ConfigError, field_names, parse_overrides, parse_value

from .config import ServingConfig, load_serving_config, load_system_config, system_names

PACKAGE = "ndp-plora"           # pyproject.toml's [project] name


class BadInput(click.ClickException):
    """A bad input: one `Error: <what>` line and exit status 2 (click's usage-error status),
    no usage text."""
    exit_code = 2


_NO_ARGS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())     # click >= 8.2: help, not an error


class PloraGroup(click.Group):
    """click.Group that turns a ConfigError escaping a command (or a scheduler command's
    ClickException made from one) into BadInput: one line, exit status 2; and a command's
    usage error (a bad option value, an unknown option) into one line as well, the
    command's --help named in it instead of the usage text."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise BadInput(str(exc)) from None
        except _NO_ARGS_HELP:
            raise
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            raise BadInput(f"{exc.format_message()} (see '{where} --help')") from None
        except click.ClickException as exc:
            if type(exc) is click.ClickException and isinstance(exc.__context__, ConfigError):
                raise BadInput(exc.message) from None
            raise


def package_version():
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


@click.group(cls=PloraGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), "--version", "-V", prog_name="plora",
                      message="%(prog)s %(version)s")
def main():
    """PLoRA on a pool of near-data-processing (NDP) memory devices: serve LoRA requests on a
    simulated GPU + CXL device pool, drive the host-side scheduler, and build, verify and
    measure the device's RTL.

    \b
    Serving:    simulate, sweep, reproduce, serve-bench, replay-step, systems
    BOOST:      boost
    Scheduler:  crossovers, steps, timing-check
    Device:     demo, validate, roofline, bench, verify, area

    `plora COMMAND --help` for a command's options. Configs are names (isa/configs,
    serving/configs, scheduler/configs) or paths to .json files; a bad one is one
    `Error:` line naming the file and the field (exit status 2).
    """


# ---- checking inputs before any work: every failure a BadInput --------------------------

def _overrides(items, cls, kind, what="field"):
    """`--set KEY=VALUE` items as a dict; BadInput for a malformed item or an unknown key
    (the valid ones listed)."""
    try:
        changes = parse_overrides(items, what.upper())
    except ConfigError as exc:
        raise BadInput(f"--set: {exc}") from None
    valid = field_names(cls)
    unknown = [k for k in changes if k not in valid]
    if unknown:
        raise BadInput(f"--set {unknown[0]}: a {kind} config has no {what} {unknown[0]!r}; "
                       f"the {what}s: {', '.join(valid)}")
    return changes


def _checked(load, *args, **kwargs):
    """`load(*args, **kwargs)`, a ConfigError or ValueError (a config class's own check) as BadInput."""
    try:
        return load(*args, **kwargs)
    except (ConfigError, ValueError, TypeError) as exc:
        raise BadInput(str(exc)) from None


def _device_config(name):
    import isa
    return _checked(isa.load_config, name)


def _run_files(cfg):
    """Load every config a run names (system, GPU, link, model, CPU, device, scheduler,
    workload), so that a bad one fails here, before the run."""
    from isa.system import load_cpu, load_gpu, load_link, load_model
    from scheduler.config import load_scheduler_config
    from .workload import load_workload_config
    system = _checked(load_system_config, cfg.system)
    _checked(load_gpu, cfg.gpu)
    for link in dict.fromkeys((cfg.link, system.link or cfg.link, system.policy_link or cfg.link)):
        _checked(load_link, link)
    _checked(load_model, cfg.model)
    if system.cpu:
        _checked(load_cpu, system.cpu)
    _device_config(cfg.device)
    _checked(load_scheduler_config, cfg.scheduler)
    _checked(load_workload_config, cfg.workload)


def _serving_config(name, overrides):
    """The run config `name` with `--set` overrides, every file it names checked."""
    changes = _overrides(overrides, ServingConfig, "run")
    cfg = _checked(load_serving_config, name, **changes)
    _run_files(cfg)
    return cfg


def _scheduler_config(config_name, overrides):
    """The scheduler config with `--set` knobs, and the GPU, link, device and model it names."""
    from scheduler.config import SchedulerConfig, load_scheduler_config
    changes = _overrides(overrides, SchedulerConfig, "scheduler", "knob")
    cfg = _checked(load_scheduler_config, config_name, **changes)
    for load in (cfg.gpu_config, cfg.link_config, cfg.device_config, cfg.model_config):
        _checked(load)
    return cfg


def _preflight(command, check):
    """A copy of click `command` whose callback runs `check(**params)` first."""
    callback = command.callback

    @functools.wraps(callback)
    def checked(**params):
        check(**params)
        return callback(**params)
    command = copy.copy(command)
    command.callback = checked
    return command


# the scheduler's commands (scheduler/cli.py), their configs checked here first
_SCHEDULER_CHECKS = {
    "crossovers": lambda config_name, overrides, **_: _scheduler_config(config_name, overrides),
    "steps": lambda config_name, overrides, **_: _scheduler_config(config_name, overrides),
    "timing-check": lambda device, **_: _device_config(device),
}
for _name, _command in scheduler_cli.main.commands.items():
    main.add_command(_preflight(_command, _SCHEDULER_CHECKS[_name]) if _name in _SCHEDULER_CHECKS else _command,
                     _name)


config_option = click.option("--config", "config_name", default="default", show_default=True,
                             help="run config: a name in serving/configs/runs or a JSON path")
set_option = click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE",
                          help="override a field of the run config (repeatable), e.g. system=ns, requests=200")


def _trace_path(value):
    """--trace: a file that can be written, its folder made now, so that a bad path fails
    before the run rather than after it."""
    value = scheduler_cli.writable_path(value, "--trace")
    if value is not None:
        try:
            value.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(f"{str(value)!r}: {exc.strerror}", param_hint="--trace") from None
    return value


def _trace_steps(value):
    """--trace-steps as serving.trace.parse_steps reads it; a bad one a usage error."""
    from .trace import parse_steps
    try:
        return parse_steps(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--trace-steps") from None


def _shared(rows):
    """What every row of a sweep shares: system, model, workload, then the hardware."""
    from .figures import setup_text
    names = [f"{k} {rows[0][k]}" for k in ("system", "model", "workload") if len({str(r[k]) for r in rows}) == 1]
    return ", ".join(names + [setup_text(rows)]) or "nothing"


def _echo_summary(summary):
    from .results import summary_lines
    for line in summary_lines(summary):
        click.echo(line)


@main.command()
@config_option
@set_option
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              help="write steps.csv, requests.csv and summary.json here")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=pathlib.Path), default=None,
              callback=lambda ctx, param, value: _trace_path(value),
              help="write the run's timeline here as a Chrome/Perfetto trace (JSON; GPU, link and each "
                   "device as tracks; open it in ui.perfetto.dev)")
@click.option("--trace-steps", default="0:50", show_default=True, metavar="A:B|N|all",
              callback=lambda ctx, param, value: _trace_steps(value),
              help="the steps the trace details by layer and round (every step is on its steps track)")
def simulate(config_name, overrides, out, trace_path, trace_steps):
    """Serve one workload on one system and print the summary (and, with --trace, write its
    timeline)."""
    from .engine import ServingError, run
    from .results import json_summary
    from .trace import Timeline
    cfg = _serving_config(config_name, overrides)
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
    if timeline is not None:
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
@click.option("--workers", default=None, type=click.IntRange(min=1), help="local cluster workers (default: one per core)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=pathlib.Path), default="build/sweep.csv",
              show_default=True, callback=lambda ctx, param, value: scheduler_cli.writable_path(value, "--out"))
@scheduler_cli.figure_option("plot throughput, TPOT and link utilization over the first numeric axis, a line "
                             "per value of the others, to this image (.png, .pdf, .svg)")
def sweep(config_name, overrides, axes, address, workers, out, plot_path):
    """Run a grid of configs (in parallel on Dask) and write one CSV row per point (and a plot)."""
    from .sweep import points, sweep as run_sweep, write_csv
    base = _serving_config(config_name, overrides)
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
        _run_files(cfg)             # a point naming a config that does not load fails here, not in a worker
    rows = run_sweep([cfg for _, cfg in labelled], address=address, workers=workers)
    rows = [dict(summary, **{f"axis_{k}": v for k, v in labels.items()}) for (labels, _), summary in zip(labelled, rows)]
    write_csv(rows, out)
    for row in rows:
        axes_text = " ".join(f"{k[5:]}={v}" for k, v in row.items() if k.startswith("axis_"))
        click.echo(f"{axes_text:40s} tok/s {row['throughput_tok_s']:9.1f}  tpot {row['tpot_ms']:8.2f} ms  "
                   f"link {row['link_util']:.2f}")
    click.echo(f"every point: {_shared(rows)}")
    click.echo(f"wrote {out}")
    if plot_path:
        from .figures import sweep_plot
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
def reproduce(out, requests, address, workers, reuse, overrides):
    """The paper's claims (sections VII-D, VIII) beside the simulator's, CSVs and figures in
    --out; the table fits 120 columns, each claim's whole cause and note in --out/claims.csv."""
    from .reproduce import ReproduceError, check_requests, reproduce as run_reproduce, reusable
    base = _serving_config("default", overrides)
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


@main.command()
@click.option("--requests", default=2000, show_default=True, type=click.IntRange(min=1),
              help="requests of the DSR churn run (Fig. 19)")
@click.option("--pool-requests", default=128, show_default=True, type=click.IntRange(min=1),
              help="requests per serving run of the pool table")
@click.option("--instances", default=300, show_default=True, type=click.IntRange(min=1),
              help="BAPP-R add-kernel instances (7 full waves each)")
def boost(requests, pool_requests, instances):
    """BOOST (seed 002, docs/boost.md): the paper's claims beside the model's, the decode-step
    and churn details, BOOST in PLoRA's pool beside PLoRA alone, and the summary line
    (make boost; `python -m boost.cli` is the same command)."""
    from boost.reproduce import reproduce as run_boost
    run_boost(echo=click.echo, requests=requests, pool_requests=pool_requests, instances=instances)


@main.command("serve-bench")
@click.option("--config", "config_name", default="serve-bench", show_default=True)
@set_option
def serve_bench(config_name, overrides):
    """Simulation speed on a 10,000-request trace (one core)."""
    from .engine import run
    cfg = _serving_config(config_name, overrides)
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
def replay_step(cases):
    """Replay whole decode steps descriptor by descriptor on model devices and the link, and
    compare their pool side with what the serving simulator charged."""
    from .replay_step import CASES, main as run_replay
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise BadInput(f"--case: unknown case {unknown[0]!r}; the cases: {', '.join(CASES)}")
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
    _device_config(config_name)
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
    _device_config(config_name)
    verify_main(config_name, echo=click.echo)


# ---- the RTL tools (rtlbench/): Verilator builds and cocotb runs -----------------------

@main.command()
def demo():
    """A GEMV and a GEMM through the driver on the RTL (Verilator), against numpy."""
    from rtlbench import demo as rtl_demo
    if rtl_demo.main():
        raise SystemExit(1)         # a failed build or run: make demo fails with it


@main.command()
@click.option("--seed", default=1, show_default=True, help="the random stream's seed")
@click.option("--count", default=240, show_default=True, type=click.IntRange(min=1), help="descriptors")
@click.option("--config", "config_name", default="default", show_default=True,
              help="device config: a name in isa/configs or a JSON path")
@click.option("--backend", type=click.Choice(("bfm", "fast")), default=None,
              help="the RTL's bench (default: bfm where the config's DRAM is the bench's RAM model, else fast)")
@click.option("--stream", "stream_path", type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path),
              default=None, help="replay this stream (JSON batches of rtlbench/stream.py Items) instead")
def validate(seed, count, config_name, backend, stream_path):
    """The cycle model against the RTL on a random descriptor stream (rtlbench/validate.py):
    per descriptor, result bytes and status must match, cycles are compared."""
    from rtlbench import validate as rtl_validate
    cfg = _device_config(config_name)
    batches = None
    if stream_path:
        from rtlbench import stream
        try:
            batches = stream.from_json(stream_path.read_text())
        except (ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"stream {stream_path}: {exc}") from None
    rtl_validate.validate(cfg, config_name, seed=seed, count=count, backend=backend, batches=batches)


@main.command()
@click.option("--config", "config_name", default="paper", show_default=True,
              help="device config: a name in isa/configs or a JSON path")
@click.option("--source", type=click.Choice(("both", "model", "rtl")), default="both", show_default=True)
@click.option("--copies", default=8, show_default=True, help="back-to-back descriptors per workload (>= 4)")
@click.option("--kinds", default=None, help="comma-separated workload kinds (default: all)")
def roofline(config_name, source, copies, kinds):
    """PE-array and DRAM-port utilization of back-to-back descriptors, RTL and model
    (rtlbench/roofline.py)."""
    from rtlbench import roofline as rtl_roofline
    if copies < rtl_roofline.WARMUP + 2:
        raise BadInput(f"--copies must be at least {rtl_roofline.WARMUP + 2} "
                       f"(the steady state needs two intervals), got {copies}")
    cfg = _device_config(config_name)
    works = rtl_roofline.workloads(cfg)
    if kinds:
        wanted = kinds.split(",")
        known = list(dict.fromkeys(w.kind for w in works))
        unknown = [k for k in wanted if k not in known]
        if unknown:
            raise BadInput(f"--kinds: unknown workload kind(s) {unknown!r}; the kinds: {', '.join(known)}")
        works = [w for w in works if w.kind in wanted]
    model = rtl_roofline.model_results(cfg, works, copies) if source != "rtl" else None
    rtl = rtl_roofline.rtl_results(config_name, [w for w in works if w.rtl], copies) if source != "model" else None
    rtl_roofline.report(cfg, works, model, rtl)


@main.command()
@click.option("--config", "config_name", default="default", show_default=True, help="device config")
def bench(config_name):
    """Simulation speed of the model, the fast RTL path and the cocotbext-axi bench on one stream."""
    from rtlbench import bench as rtl_bench
    _device_config(config_name)
    rtl_bench.main(config_name)


if __name__ == "__main__":
    main()

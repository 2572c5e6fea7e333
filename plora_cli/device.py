"""The device's commands: the area model (area/), the verification environment (verify/),
and the RTL tools (rtlbench/: Verilator builds and cocotb runs): area, verify, demo,
validate, roofline, bench."""
import pathlib

import click

from .app import BadInput, device_config, main, out_folder


@main.command()
@click.option("--config", "config_name", default="default", show_default=True,
              help="device config: a name in isa/configs or a JSON path")
@click.option("--out", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              callback=out_folder, help="where report-<config>.json and .md go (default build/area)")
@click.option("--scaling", is_flag=True,
              help="each block's growth over the 1 and 2 channel variants a scaled config is fitted to, "
                   "and the lane-wide blocks alone at 1, 2 and 4 channels")
def area(config_name: str, out: pathlib.Path | None, scaling: bool) -> None:
    """Area, power and timing of the NDP core at 45 nm beside the paper's (area/report.py)."""
    from area import blocks, report
    device_config(config_name)
    try:
        if scaling:
            blocks.main(["--config", config_name, "--scaling"])
        else:
            report.run(config_name, **({"out_dir": out} if out else {}), echo=click.echo)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--config", "config_name", default="default", show_default=True, help="device config")
def verify(config_name: str) -> None:
    """The verification environment at full size: coverage goals, faults, fuzzing, resets,
    the soak (verify/cli.py); the last line sums it up."""
    from verify.cli import main as verify_main
    device_config(config_name)
    verify_main(config_name, echo=click.echo)


# ---- the RTL tools (rtlbench/): Verilator builds and cocotb runs -----------------------

@main.command()
def demo() -> None:
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
def validate(seed: int, count: int, config_name: str, backend: str | None, stream_path: pathlib.Path | None) -> None:
    """The cycle model against the RTL on a random descriptor stream (rtlbench/validate.py):
    per descriptor, result bytes and status must match, cycles are compared."""
    from rtlbench import validate as rtl_validate
    cfg = device_config(config_name)
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
def roofline(config_name: str, source: str, copies: int, kinds: str | None) -> None:
    """PE-array and DRAM-port utilization of back-to-back descriptors, RTL and model
    (rtlbench/roofline.py)."""
    from rtlbench import roofline as rtl_roofline
    if copies < rtl_roofline.WARMUP + 2:
        raise BadInput(f"--copies must be at least {rtl_roofline.WARMUP + 2} "
                       f"(the steady state needs two intervals), got {copies}")
    cfg = device_config(config_name)
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
def bench(config_name: str) -> None:
    """Simulation speed of the model, the fast RTL path and the cocotbext-axi bench on one stream."""
    from rtlbench import bench as rtl_bench
    device_config(config_name)
    rtl_bench.main(config_name)

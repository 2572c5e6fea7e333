"""The `plora` group itself: its errors (`BadInput`, `PloraGroup`), `--version`, and the
checks every command makes on its inputs before any work starts (a failure a `BadInput`).
The commands join the group in the modules beside this one."""
import copy
import functools
import importlib.metadata
from collections.abc import Callable, Iterable
from typing import Any

import click

from isa.config import ConfigError, DeviceConfig, field_names, parse_overrides
from scheduler.config import SchedulerConfig
from serving.config import ServingConfig, load_serving_config, load_system_config

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

    def invoke(self, ctx: click.Context) -> Any:
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


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


@click.group(cls=PloraGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), "--version", "-V", prog_name="plora",
                      message="%(prog)s %(version)s")
def main() -> None:
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

def overrides(items: Iterable[str], cls: type, kind: str, what: str = "field") -> dict[str, Any]:
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


def checked(load: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`load(*args, **kwargs)`, a ConfigError or ValueError (a config class's own check) as BadInput."""
    try:
        return load(*args, **kwargs)
    except (ConfigError, ValueError, TypeError) as exc:
        raise BadInput(str(exc)) from None


def device_config(name: str) -> DeviceConfig:
    import isa
    return checked(isa.load_config, name)


def run_files(cfg: ServingConfig) -> None:
    """Load every config a run names (system, GPU, link, model, CPU, device, scheduler,
    workload), so that a bad one fails here, before the run."""
    from isa.system import load_cpu, load_gpu, load_link, load_model
    from scheduler.config import load_scheduler_config
    from serving.workload import load_workload_config
    system = checked(load_system_config, cfg.system)
    checked(load_gpu, cfg.gpu)
    for link in dict.fromkeys((cfg.link, system.link or cfg.link, system.policy_link or cfg.link)):
        checked(load_link, link)
    checked(load_model, cfg.model)
    if system.cpu:
        checked(load_cpu, system.cpu)
    device_config(cfg.device)
    checked(load_scheduler_config, cfg.scheduler)
    checked(load_workload_config, cfg.workload)


def serving_config(name: str, items: Iterable[str]) -> ServingConfig:
    """The run config `name` with `--set` overrides, every file it names checked."""
    changes = overrides(items, ServingConfig, "run")
    cfg = checked(load_serving_config, name, **changes)
    run_files(cfg)
    return cfg


def scheduler_config(config_name: str, items: Iterable[str]) -> SchedulerConfig:
    """The scheduler config with `--set` knobs, and the GPU, link, device and model it names."""
    from scheduler.config import load_scheduler_config
    changes = overrides(items, SchedulerConfig, "scheduler", "knob")
    cfg = checked(load_scheduler_config, config_name, **changes)
    for load in (cfg.gpu_config, cfg.link_config, cfg.device_config, cfg.model_config):
        checked(load)
    return cfg


def out_folder(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A click callback for an output folder option (click.Path(file_okay=False)): the folder
    exists or can be made (no file on its way, writable), else a usage error naming the
    option, so that a bad --out fails before the work rather than after it."""
    if value is None:
        return None
    import os
    import pathlib
    option = param.opts[0] if param.opts else str(param.name)
    folder = pathlib.Path(value).absolute()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise click.BadParameter(f"{str(value)!r}: {str(folder)!r} is a file, not a folder", param_hint=option)
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"{str(value)!r}: cannot write in {str(folder)!r}", param_hint=option)
    return value


def preflight(command: click.Command, check: Callable[..., object]) -> click.Command:
    """A copy of click `command` whose callback runs `check(**params)` first."""
    callback = command.callback
    assert callback is not None, command.name

    @functools.wraps(callback)
    def checked_first(**params: Any) -> Any:
        check(**params)
        return callback(**params)
    command = copy.copy(command)
    command.callback = checked_first
    return command

"""The scheduler's commands (scheduler/cli.py: crossovers, steps, timing-check) in `plora`,
their configs checked here before any work."""
from collections.abc import Callable

import scheduler.cli as scheduler_cli

from .app import device_config, main, preflight, scheduler_config

_CHECKS: dict[str, Callable[..., object]] = {
    "crossovers": lambda config_name, overrides, **_: scheduler_config(config_name, overrides),
    "steps": lambda config_name, overrides, **_: scheduler_config(config_name, overrides),
    "timing-check": lambda device, **_: device_config(device),
}
for _name, _command in scheduler_cli.main.commands.items():
    main.add_command(preflight(_command, _CHECKS[_name]) if _name in _CHECKS else _command, _name)

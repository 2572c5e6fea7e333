"""`plora`: the project's one command line (click throughout), the top layer: it imports every
package and none imports it (pyproject.toml's import-linter contract).

    plora simulate [--config default] [--set system=ns ...] [--trace F]  one run: summary, CSVs, timeline
    plora sweep --axis link_gb_s=8,16,... [--address tcp://...] [--plot PATH]  a grid of runs on Dask
    plora reproduce [--out build/reproduce]                    the paper's claims (make reproduce)
    plora serve-bench                                          the simulator's speed (make serve-bench)
    plora replay-step [--case llama2-7b-short ...]             whole steps on model devices vs the charge
                                                               (make replay-step)
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

The group, its errors and the input checks are `app`; the commands join it by group, one
module each: `serving` (serving/), `boost` (boost/), `scheduler` (scheduler/cli.py's
commands), `device` (area/, verify/, rtlbench/). `python -m plora_cli` is `plora`.
"""
from . import boost, device, scheduler, serving  # noqa: F401  (each adds its commands to main)
from .app import BadInput, PloraGroup, main, package_version

__all__ = ["BadInput", "PloraGroup", "main", "package_version"]

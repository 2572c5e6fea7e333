"""The settings of a verification run, in one typed object.

A run on the RTL is a simulator process that rtlbench/runner.py starts; its settings reach
that process as environment variables, which is the only way a make target or the runner
can hand them over. They are read here and nowhere else, once, into a `VerifySettings`:

    NDP_CONFIG       the device config (isa/configs/<name>.json); set by the runner
    COCOTB_TOPLEVEL  the top the simulation was built with (ndp_device or ndp_fast_top);
                     set by cocotb's runner
    NDP_UVM_SIZE     the pyuvm environment's counts: full (make verify), reduced (make test)
                     or bfm (the cocotbext-axi bench's share of make verify)
    NDP_VERIFY_SEED  the seed of every random choice (an integer)
    NDP_VERIFY_COUNT how many words, resets or descriptors a verify/cocotb_verify.py test runs
    NDP_VERIFY_OUT   the JSON file a run writes its record to

In the pyuvm environment the test puts the object in ConfigDB at its top (verify/uvm/env.py,
key `SETTINGS`) and every component gets it from there; verify/cocotb_verify.py's tests
read it with `VerifySettings.from_env()`. The side that starts a run builds one and passes
`settings.env()` to the runner, so a variable's name and format live in this module only.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import isa

# the counts of the random parts of the pyuvm env's TopSeq: the full run (`make verify`), the
# reduced one (`make test`), and the cocotbext-axi bench's, which runs ~200x slower than the
# fast path
SIZES: dict[str, dict[str, int]] = {
    "full": {"compute": 400, "backpressure": 100, "fuzz": 1000},
    "reduced": {"compute": 40, "backpressure": 12, "fuzz": 400},
    "bfm": {"compute": 8, "backpressure": 6, "fuzz": 60},
}
TOPS = ("ndp_device", "ndp_fast_top")
# the names of the variables, each read by from_env and written by env()
CONFIG, TOP, SIZE, SEED, COUNT, OUT = ("NDP_CONFIG", "COCOTB_TOPLEVEL", "NDP_UVM_SIZE", "NDP_VERIFY_SEED",
                                       "NDP_VERIFY_COUNT", "NDP_VERIFY_OUT")


class SettingsError(ValueError):
    """A variable with a value the run cannot use; the message names it and what it may be."""


@dataclasses.dataclass(frozen=True)
class VerifySettings:
    config: str = "default"
    top: str = "ndp_fast_top"
    size: str = "reduced"
    seed: int = 1
    count: int | None = None
    out: str | None = None

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise SettingsError(f"{SIZE}={self.size!r}: one of {', '.join(SIZES)}")
        if self.top not in TOPS:
            raise SettingsError(f"{TOP}={self.top!r}: one of {', '.join(TOPS)}")
        if self.count is not None and self.count < 0:
            raise SettingsError(f"{COUNT}={self.count!r}: a count, 0 or more")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> VerifySettings:
        """The settings the variables give (os.environ unless `environ`), defaults for those unset."""
        env = os.environ if environ is None else environ

        def integer(name: str, default: int | None) -> int | None:
            text = env.get(name, "").strip()
            if not text:
                return default
            try:
                return int(text, 0)
            except ValueError:
                raise SettingsError(f"{name}={text!r}: an integer") from None
        seed = integer(SEED, 1)
        assert seed is not None
        return cls(config=env.get(CONFIG) or cls.config, top=env.get(TOP) or cls.top,
                   size=env.get(SIZE) or cls.size, seed=seed, count=integer(COUNT, None),
                   out=env.get(OUT) or None)

    def env(self) -> dict[str, str]:
        """The variables that carry these settings into a simulator process. The config and the
        top are left out: the runner sets those from its own arguments."""
        out = {SIZE: self.size, SEED: str(self.seed)}
        if self.count is not None:
            out[COUNT] = str(self.count)
        if self.out is not None:
            out[OUT] = str(self.out)
        return out

    # ---- what follows from them ----------------------------------------------------------

    @property
    def counts(self) -> dict[str, int]:
        """The random parts' counts of TopSeq at this size."""
        return SIZES[self.size]

    @property
    def host_port(self) -> bool:
        """Whether the host's accesses go through the device's CXL.mem port (the cocotbext-axi
        bench), not the fast path's DRAM backdoor."""
        return self.top == "ndp_device"

    @property
    def backend(self) -> str:
        """The name of rtlbench's backend on this top (Backend.name)."""
        return "rtl" if self.host_port else "rtl_fast"

    @property
    def corners(self) -> bool:
        """Whether the run covers the corner shapes (the bench's short run does not)."""
        return self.size != "bfm"

    @property
    def require_goals(self) -> bool:
        """Whether a missed coverage goal fails the run (not on the bench's short run)."""
        return self.size != "bfm"

    def count_or(self, default: int) -> int:
        return default if self.count is None else self.count

    def device_config(self) -> isa.DeviceConfig:
        return isa.load_config(self.config)

    def report_path(self, suffix: str = "") -> str:
        """Where the run's JSON record goes (coverage.json when no file was named)."""
        return (self.out or "coverage.json").replace(".json", f"{suffix}.json")

"""Sequence items: one host action on the device each, its kind the item's type. The driver
dispatches on the type (driver.py `drive`), the scoreboard and the coverage ask the type
(isinstance) where an action needs its own treatment."""
from __future__ import annotations

from typing import Any

from pyuvm import uvm_sequence_item


class NdpItem(uvm_sequence_item):
    """A host action on `queue`; a descriptor from a `recipe` where the action has one.

    recipe: a rtlbench/stream.py Item (its data drawn from its seed, its result checked
    against the model) or a verify/fuzz.py Case (a raw word, its status checked against
    the decode rules). fault: (which, read_resp, write_resp) to inject for this descriptor:
    which is "operand" (its device operand's first line), "input" (its input's first line)
    or "result" (the first line of its result).

    The driver fills in: desc, payload, expected (the decode rules' status, or DRAM_ERROR
    for a fault the descriptor reaches), completions (one per descriptor it ran, as the
    driver read them), checks (what the driver observed), backpressure (stalls were on),
    stalls (inserted while it ran, per channel kind).
    """
    kind = "action"              # its name in reports

    def __init__(self, name: str, queue: int = 0, recipe: Any = None, fault: tuple[str, int, int] | None = None):
        super().__init__(name)
        self.queue, self.recipe, self.fault = queue, recipe, fault
        self.desc: Any = None
        self.payload = b""
        self.expected: Any = None
        self.completions: list[Any] = []
        self.fault_reached: tuple[str, int] | None = None  # ("read" or "write", response) on a line it touches
        self.checks: list[tuple[str, bool]] = []           # (what, passed) observed by the driver
        self.backpressure = False
        self.stalls: dict[str, int] = {}
        self.seen: list[Any] = []   # the scoreboard's: each completion as the monitor saw it (None: not seen)

    def __str__(self) -> str:
        what = self.recipe.label() if hasattr(self.recipe, "label") else repr(self.desc)
        return f"{self.get_name()} {self.kind} q{self.queue} {what}"


class DescriptorItem(NdpItem):
    """Submit one descriptor and wait for its completion."""
    kind = "descriptor"


class EarlyDoorbellItem(NdpItem):
    """Ring before the valid word is written (spec 2.2): nothing may run until it is."""
    kind = "early_doorbell"


class RepeatedDoorbellItem(NdpItem):
    """Ring the same tail again, then an older one: no descriptor runs twice."""
    kind = "repeated_doorbell"


class FillQueueItem(NdpItem):
    """Every slot of the ring submitted before any wait (GEMVs of the recipe's shape)."""
    kind = "fill_queue"

    def __init__(self, name: str, queue: int = 0, recipe: Any = None, fault: tuple[str, int, int] | None = None):
        super().__init__(name, queue, recipe, fault)
        self.fill: list[tuple[Any, Any]] = []     # (recipe, (descriptor, payload)) of each slot


class ForeignDoorbellItem(NdpItem):
    """A doorbell from a PASID not bound to the queue, then the bound one's."""
    kind = "foreign_doorbell"


class ForeignConfigItem(NdpItem):
    """A configuration write from a PASID other than the host's, then a descriptor."""
    kind = "foreign_config"


class ForeignMemItem(NdpItem):
    """A CXL.mem access to another queue's slots (the cocotbext-axi bench), then a descriptor."""
    kind = "foreign_mem"


class StallsItem(NdpItem):
    """Random stalls on every channel from now on (`on`), or none from now on."""

    def __init__(self, name: str, on: bool):
        super().__init__(name)
        self.on = on
        self.kind = "backpressure_on" if on else "backpressure_off"


# the protocol actions ProtocolSeq runs on every queue (ForeignMemItem only where the host's
# accesses go through CXL.mem)
PROTOCOL_ITEMS: tuple[type[NdpItem], ...] = (EarlyDoorbellItem, RepeatedDoorbellItem, FillQueueItem,
                                             ForeignDoorbellItem, ForeignConfigItem, ForeignMemItem)

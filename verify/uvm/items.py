"""Sequence items: one host action on the device each."""
from pyuvm import uvm_sequence_item

# what a DescriptorItem asks the driver to do
DESCRIPTOR = "descriptor"              # submit one descriptor and wait for its completion
EARLY_DOORBELL = "early_doorbell"      # ring before the valid word is written (spec 2.2)
REPEATED_DOORBELL = "repeated_doorbell"  # ring the same tail again, then an older one
FILL_QUEUE = "fill_queue"              # every slot of the ring submitted before any wait
FOREIGN_DOORBELL = "foreign_doorbell"  # a doorbell from a PASID not bound to the queue
FOREIGN_CONFIG = "foreign_config"      # a configuration write from a PASID other than the host's
FOREIGN_MEM = "foreign_mem"            # a CXL.mem access to another queue's slots (cocotbext-axi bench)
BACKPRESSURE_ON = "backpressure_on"    # random stalls on every channel from now on
BACKPRESSURE_OFF = "backpressure_off"
ACTIONS = (DESCRIPTOR, EARLY_DOORBELL, REPEATED_DOORBELL, FILL_QUEUE, FOREIGN_DOORBELL, FOREIGN_CONFIG,
           FOREIGN_MEM, BACKPRESSURE_ON, BACKPRESSURE_OFF)


class DescriptorItem(uvm_sequence_item):
    """A descriptor from a `recipe` on `queue`, or a protocol action.

    recipe: a rtlbench/stream.py Item (its data drawn from its seed, its result checked
    against the model) or a verify/fuzz.py Case (a raw word, its status checked against
    the decode rules). fault: (which, read_resp, write_resp) to inject for this descriptor:
    which is "operand" (its device operand's first line), "input" (its input's first line)
    or "result" (the first line of its result).

    The driver fills in: desc, payload, expected (the decode rules' status, or DRAM_ERROR
    for a fault the descriptor reaches), completions (one per descriptor it ran), events
    (what the device did that the scoreboard checks), backpressure (stalls were on).
    """

    def __init__(self, name, action=DESCRIPTOR, queue=0, recipe=None, fault=None):
        super().__init__(name)
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        self.action, self.queue, self.recipe, self.fault = action, queue, recipe, fault
        self.desc = None
        self.payload = b""
        self.expected = None
        self.completions = []
        self.fill = []              # FILL_QUEUE: (recipe, (descriptor, payload)) of each slot
        self.fault_reached = None   # ("read" or "write", response): the fault on a line it touches
        self.checks = []            # (what, passed) observed by the driver
        self.backpressure = False
        self.stalls = {}            # stalls inserted while the item ran, per channel kind

    def __str__(self):
        what = self.recipe.label() if hasattr(self.recipe, "label") else repr(self.desc)
        return f"{self.get_name()} {self.action} q{self.queue} {what}"

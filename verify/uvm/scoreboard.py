"""The scoreboard: every completion's status against the decode rules (isa/validate.py) or,
for an injected fault the descriptor reaches, DRAM_ERROR; every check the driver observed;
and, after the run, every descriptor with data (rtlbench/stream.py recipes) replayed on
the cycle-approximate model with the same host program: the result bytes must be equal and
the cycles within `make validate`'s targets (median within 2 %, every one within 5 %) where
no stall was injected (the model has none)."""
import asyncio
import statistics

from pyuvm import ConfigDB, uvm_component, uvm_tlm_analysis_fifo, uvm_get_port

from driver import NdpDevice
from driver.model_transport import ModelTransport
from isa import Status
from isa.validate import written_ranges
from verify import fuzz
from rtlbench import stream

from . import items as I
from .driver import configure

MEDIAN_PERCENT, WORST_PERCENT = 2.0, 5.0


def _written(desc, result):
    """The result's bytes the device writes (isa.validate.written_ranges): the rest of the
    span keeps whatever the slot held, which differs between the RTL's and the replay's
    histories."""
    return b"".join(result[lo:hi] for lo, hi in written_ranges(desc)) if result else result


class NdpScoreboard(uvm_component):
    def build_phase(self):
        self.item_fifo = uvm_tlm_analysis_fifo("item_fifo", self)
        self.item_port = uvm_get_port("item_port", self)
        self.item_export = self.item_fifo.analysis_export
        self.errors = []
        self.summary = {}

    def connect_phase(self):
        self.item_port.connect(self.item_fifo.get_export)

    def start_of_simulation_phase(self):
        self.env = ConfigDB().get(self, "", "BACKEND")

    def check_phase(self):
        items = []
        while self.item_port.can_get():
            _, item = self.item_port.try_get()
            items.append(item)
            self._check_item(item)
        self._replay_on_model(items)
        for error in self.errors[:20]:
            self.logger.error(error)
        self.summary.update(items=len(items), errors=len(self.errors))

    def _check_item(self, item):
        if item.fault is not None:
            # faults by where they lay, the DRAM's answer, whether the descriptor reached the
            # line, and the status it completed with
            which, read, write = item.fault
            access, response = item.fault_reached or ("unreached", max(read, write))
            status = item.completions[0].status.name if item.completions else "none"
            key = f"{which} {access} {'SLVERR' if response == 2 else 'DECERR'} -> {status}"
            faults = self.summary.setdefault("faults", {})
            faults[key] = faults.get(key, 0) + 1
        for what, passed in item.checks:
            if not passed:
                self.errors.append(f"{item}: {what}")
        if item.action in (I.BACKPRESSURE_ON, I.BACKPRESSURE_OFF):
            return
        if not item.completions:
            self.errors.append(f"{item}: no completion")
        for completion in item.completions:
            if completion.status != item.expected:
                self.errors.append(f"{item}: status {completion.status.name}, expected {item.expected.name}")
            if completion.status != Status.OK and completion.result:
                self.errors.append(f"{item}: a result reported with status {completion.status.name}")

    def _replay_on_model(self, items):
        """The recipes' descriptors again, one at a time, on the model."""
        runs = []                       # (item, descriptor, payload, completion on the RTL)
        for item in items:
            if item.fault is not None or not item.completions or isinstance(item.recipe, fuzz.Case):
                continue
            if item.action == I.FILL_QUEUE:
                runs += [(item, recipe, c, False) for (recipe, _), c in zip(item.fill, item.completions)]
            elif item.recipe is not None:
                timed = item.action == I.DESCRIPTOR and not item.backpressure
                runs += [(item, item.recipe, c, timed) for c in item.completions]
        cfg = self.env.cfg
        backdoor = self.env.name == "rtl_fast"       # host data through the DRAM backdoor there

        async def replay():
            dev = await NdpDevice.open(ModelTransport(cfg, backdoor_memory=backdoor))
            queues = await configure(dev, cfg)
            out, i = [], 0
            while i < len(runs):
                # an item's descriptors uploaded together, as the driver did (a full ring's)
                group = [run for run in runs[i:] if run[0] is runs[i][0]]
                queue = queues[group[0][0].queue]
                prepared = [await stream.prepare(dev, queue, recipe, recipe.arrays()) for _, recipe, _, _ in group]
                for desc, payload in prepared:
                    out.append((desc, await queue.run(desc, payload, timeout_cycles=fuzz.TIMEOUT_CYCLES)))
                queue.free_all()
                i += len(group)
            return out
        errors = []
        for (item, recipe, rtl, timed), (desc, model) in zip(runs, asyncio.run(replay())):
            if desc != rtl.descriptor:
                self.errors.append(f"{item}: the model's replay built {desc!r}, the RTL ran {rtl.descriptor!r}")
            elif model.status != rtl.status or _written(desc, model.result) != _written(desc, rtl.result):
                self.errors.append(f"{item}: {recipe.label()} differs from the model "
                                   f"({rtl.status.name} vs {model.status.name})")
            elif timed and rtl.status == Status.OK:
                errors.append(100.0 * abs(model.cycles - rtl.cycles) / max(rtl.cycles, 1))
        self.summary.update(replayed=len(runs), timed=len(errors))
        if errors:
            median, worst = statistics.median(errors), max(errors)
            self.summary.update(cycle_error_median=median, cycle_error_worst=worst)
            if median > MEDIAN_PERCENT or worst > WORST_PERCENT:
                self.errors.append(f"cycles against the model: median {median:.2f} %, worst {worst:.2f} % "
                                   f"(targets {MEDIAN_PERCENT} %, {WORST_PERCENT} %)")

"""The scoreboard, fed by the driver (what each item meant: its descriptor, the status the
decode rules predict, its fault, what the driver checked) and by the monitor (what crossed
the transport: each completion as the host read it, each register write and refused
CXL.mem access). It checks:

- every completion the driver read crossed the transport as the monitor saw it (same
  descriptor, status and result), and no completion crossed that no item waited for (a
  duplicate);
- every status the monitor saw against the decode rules (isa/validate.py) or, for an
  injected fault the descriptor reaches, DRAM_ERROR; no result with a non-OK status;
- every access the monitor saw refused exactly where the PASID rules refuse it;
- every check the driver observed;
- after the run, every descriptor with data (rtlbench/stream.py recipes) replayed on the
  cycle-approximate model with the same host program: the result bytes the monitor saw must
  equal the model's and the cycles be within `make validate`'s targets (median within 2 %,
  every one within 5 %) where no stall was injected (the model has none)."""
import asyncio
import statistics

from pyuvm import ConfigDB, uvm_component, uvm_get_port, uvm_tlm_analysis_fifo

from driver import NdpDevice
from driver.model_transport import ModelTransport
from isa import Status
from isa.validate import written_ranges
from rtlbench import stream
from verify import fuzz

from .driver import configure
from .items import DescriptorItem, FillQueueItem, StallsItem
from .monitor import BusEvent, CompletionSeen

MEDIAN_PERCENT, WORST_PERCENT = 2.0, 5.0


def _name(status):
    """A status's name; an unknown status word (no Status member) as its number."""
    return getattr(status, "name", repr(status))


def _written(desc, result):
    """The result's bytes the device writes (isa.validate.written_ranges): the rest of the
    span keeps whatever the slot held, which differs between the RTL's and the replay's
    histories."""
    return b"".join(result[lo:hi] for lo, hi in written_ranges(desc)) if result else result


class NdpScoreboard(uvm_component):
    def build_phase(self):
        # the driver's items and the monitor's observations, each through its own FIFO
        self.item_fifo = uvm_tlm_analysis_fifo("item_fifo", self)
        self.item_port = uvm_get_port("item_port", self)
        self.item_export = self.item_fifo.analysis_export
        self.seen_fifo = uvm_tlm_analysis_fifo("seen_fifo", self)
        self.seen_port = uvm_get_port("seen_port", self)
        self.seen_export = self.seen_fifo.analysis_export
        self.errors = []
        self.summary = {}

    def connect_phase(self):
        self.item_port.connect(self.item_fifo.get_export)
        self.seen_port.connect(self.seen_fifo.get_export)

    def start_of_simulation_phase(self):
        self.settings = ConfigDB().get(self, "", "SETTINGS")

    @staticmethod
    def _all(port):
        out = []
        while port.can_get():
            _, value = port.try_get()
            out.append(value)
        return out

    def check_phase(self):
        items, seen = self._all(self.item_port), self._all(self.seen_port)
        completions = {}
        for observed in seen:
            if isinstance(observed, CompletionSeen):
                completions.setdefault((observed.queue, observed.seq), []).append(observed)
            elif isinstance(observed, BusEvent):
                self._check_bus_event(observed)
        for item in items:
            self._check_item(item, completions)
        for (queue, seq), extra in completions.items():
            for c in extra:
                self.errors.append(f"queue {queue} seq {seq}: a completion ({c.status!r}) no item waited for")
        self._replay_on_model(items)
        for error in self.errors[:20]:
            self.logger.error(error)
        self.summary.update(items=len(items), errors=len(self.errors),
                            completions_seen=sum(isinstance(o, CompletionSeen) for o in seen),
                            bus_events=sum(isinstance(o, BusEvent) for o in seen),
                            refused=sum(isinstance(o, BusEvent) and o.refused for o in seen))

    def _check_bus_event(self, event):
        if event.refused != event.must_refuse:
            where = f"queue {event.queue}" if event.queue >= 0 else "no queue"
            self.errors.append(f"{where}: a {event.kind} from PASID {event.pasid:#x} was "
                               f"{'refused' if event.refused else 'accepted'}, the PASID rules "
                               f"{'refuse' if event.must_refuse else 'accept'} it ({event.detail})")

    def _seen(self, item, completion, completions):
        """The monitor's record of the completion the driver read; None (an error) if none
        or a different one crossed the transport."""
        found = completions.get((completion.queue, completion.seq))
        if not found:
            self.errors.append(f"{item}: seq {completion.seq} read by the driver, seen by no monitor")
            return None
        seen = found.pop(0)
        if not found:
            del completions[(completion.queue, completion.seq)]
        if (seen.descriptor, seen.status, seen.result) != (completion.descriptor, completion.status,
                                                           completion.result):
            self.errors.append(f"{item}: the driver read {completion.status!r} for seq {completion.seq}, "
                               f"the transport carried {seen.status!r} (or another descriptor or result)")
            return None
        return seen

    def _check_item(self, item, completions):
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
        if isinstance(item, StallsItem):
            return
        if not item.completions:
            self.errors.append(f"{item}: no completion")
        item.seen = [self._seen(item, c, completions) for c in item.completions]
        for completion in filter(None, item.seen):
            if completion.status != item.expected:
                self.errors.append(f"{item}: status {_name(completion.status)}, expected {_name(item.expected)}")
            if completion.status != Status.OK and completion.result:
                self.errors.append(f"{item}: a result reported with status {_name(completion.status)}")

    def _replay_on_model(self, items):
        """The recipes' descriptors again, one at a time, on the model."""
        runs = []                       # (item, descriptor, payload, completion on the RTL)
        for item in items:
            if item.fault is not None or not item.completions or isinstance(item.recipe, fuzz.Case):
                continue
            # what the host read, as the monitor saw it (a completion it did not see is an
            # error already)
            if isinstance(item, FillQueueItem):
                runs += [(item, recipe, c, False) for (recipe, _), c in zip(item.fill, item.seen) if c]
            elif item.recipe is not None:
                timed = isinstance(item, DescriptorItem) and not item.backpressure
                runs += [(item, item.recipe, c, timed) for c in item.seen if c]
        cfg = self.settings.device_config()
        backdoor = not self.settings.host_port       # host data through the DRAM backdoor there

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
                                   f"({_name(rtl.status)} vs {_name(model.status)})")
            elif timed and rtl.status == Status.OK:
                errors.append(100.0 * abs(model.cycles - rtl.cycles) / max(rtl.cycles, 1))
        self.summary.update(replayed=len(runs), timed=len(errors))
        if errors:
            median, worst = statistics.median(errors), max(errors)
            self.summary.update(cycle_error_median=median, cycle_error_worst=worst)
            if median > MEDIAN_PERCENT or worst > WORST_PERCENT:
                self.errors.append(f"cycles against the model: median {median:.2f} %, worst {worst:.2f} % "
                                   f"(targets {MEDIAN_PERCENT} %, {WORST_PERCENT} %)")

"""The cycle-approximate model of `ndp_device`: the blocks of hw/device.py, driven by
events instead of clock cycles.

Time only moves when the host lets it (`advance`). Each step is the earliest of: the
command engine fetching a slot, the front end popping a descriptor (its whole schedule is
computed then, from sim/control_unit.py, after the schedules of the descriptors before
it), or an effect taking place (a completion line landing, HEAD, STATUS and the interrupt
when it is answered). A descriptor's result bytes are in the model's memory from its
schedule on (the host reads them only after the completion); its completion line lands
when the RTL writes it.

The front end runs ahead of the control unit, so several descriptors' reads can be in
flight; a command-engine read that the arbiter takes among their bursts delays the later
ones, so every descriptor with a burst after it is scheduled again, in order, from the
state the one before it left.
"""
import heapq

from . import command_engine, completion, dram_arbiter, dram_interleaver
from .command_engine import CommandEngine
from .control_unit import ControlUnit, State
from .instruction_buffer import InstructionBuffer
from .memory import SparseMemory
from .regfile import RegisterFile

NEVER = float("inf")
STEAL_HORIZON = 1 << 12     # command-engine reads older than this (cycles) no longer matter


class _Scheduled:
    """A descriptor whose schedule may still change: what it was scheduled from, and its schedule."""

    def __init__(self, entry, regs, queues, pop, before):
        self.entry, self.regs, self.queues, self.pop, self.before = entry, regs, queues, pop, before
        self.schedule = None
        self.generation = 0


class NdpModel:
    def __init__(self, cfg):
        self.cfg = cfg
        self.now = 0
        self.memory = SparseMemory(cfg.dram_bytes)
        self.regfile = RegisterFile(cfg)
        self.engine = CommandEngine(cfg, self.memory)
        self.ibuf = InstructionBuffer(cfg.ibuf_depth)
        self.control = ControlUnit(cfg, self.memory)
        self.state = State.initial(cfg)  # what the newest scheduled descriptor leaves
        self.open = []                   # scheduled descriptors a command-engine read may still delay
        self._pending = []               # (cycle, order, action) effects taking place
        self._order = 0
        self._fetch_reads = []           # (request, handshake, beat, control_first) of the command engine's reads
        self.pop_cycle = 0
        self.irq_count = [0] * cfg.num_queues

    # ---- host side ----------------------------------------------------------------------

    def reg_write(self, offset, value, pasid):
        restarted = self.regfile.write(offset, value, pasid)
        if restarted is not None:
            self.engine.reset_queue(restarted)

    def reg_read(self, offset, pasid):
        return self.regfile.read(offset, pasid)

    # ---- time -----------------------------------------------------------------------------

    def advance(self, until):
        """Run every event up to cycle `until`."""
        while True:
            step = self._next_event()
            if step is None or step[0] > until:
                break
            step[1]()
        self.now = max(self.now, until)

    def next_event_cycle(self):
        step = self._next_event()
        return NEVER if step is None else step[0]

    def _next_event(self):
        candidates = []
        if self._pending:
            cycle, _, action = self._pending[0]
            candidates.append((cycle, self._apply_pending))
        fetch_at = max(self.engine.idle_at, self.now)
        if self.engine.pick(self.regfile.queues, fetch_at) is not None:
            candidates.append((fetch_at, lambda: self._fetch(fetch_at)))
        else:
            # a queue in back-off becomes eligible again later
            waits = [b for q, b in enumerate(self.engine.backoff_until) if b > fetch_at
                     and self._pending_work(q)]
            if waits:
                candidates.append((min(waits), lambda: self._wake(min(waits))))
        head = self.ibuf.head()
        if head is not None:
            pop_at = max(self.state.front_free, head.ready)
            candidates.append((pop_at, lambda: self._pop(pop_at)))
        return min(candidates, key=lambda c: c[0]) if candidates else None

    def _pending_work(self, q):
        regs = self.regfile.queues[q]
        ahead = (regs.tail - (self.engine.next_seq[q] - 1)) & 0xFFFFFFFF
        return regs.enable and 0 < ahead < (1 << 31)

    def _wake(self, cycle):
        self.engine.idle_at = max(self.engine.idle_at, cycle)

    def _bursts(self):
        """(handshake, last beat) of every burst of the descriptors scheduled and open."""
        return sorted(b for s in self.open for b in s.schedule.read_busy)

    def _fetch_handshake(self, request):
        """(handshake, beat) of a command-engine read asking from cycle `request`."""
        self._control_first = self._last_grant_was_fetch(request)
        return dram_arbiter.engine_grant(request, self._bursts(), self._control_first, self.cfg)

    def _last_grant_was_fetch(self, request):
        fetches = [read[1] for read in self._fetch_reads if read[1] <= request]
        bursts = [handshake for handshake, _ in self._bursts() if handshake <= request]
        return bool(fetches) and (not bursts or max(fetches) > max(bursts))

    def _fetch(self, cycle):
        q = self.engine.pick(self.regfile.queues, cycle)
        regs = self.regfile.queues[q]
        line = regs.slot_addr(regs.sq_base, self.engine.next_seq[q]) // self.cfg.port_bytes
        entry, handshake, arrival = self.engine.fetch(self.regfile.queues, q, cycle, self._fetch_handshake)
        self._steal((cycle + command_engine.ADDR_DELAY - 1, handshake, arrival, self._control_first,
                     dram_interleaver.channel_of(line, self.cfg.dram_channels)))
        if entry is None:
            return
        push = arrival + 1
        if self.ibuf.full():
            # PUSH waits for the front end to pop the oldest entry
            head = self.ibuf.head()
            self._pop(max(self.state.front_free, head.ready))
            push = max(push, self.pop_cycle)
        self.ibuf.push(entry, push)
        self.engine.idle_at = push + 1

    def _steal(self, read):
        """A command-engine read among the reader's bursts: the descriptors with a burst
        from its request on are scheduled again, in order."""
        self._fetch_reads = [r for r in self._fetch_reads if r[2] >= read[0] - STEAL_HORIZON] + [read]
        for index, scheduled in enumerate(self.open):
            if any(handshake >= read[0] for handshake, _ in scheduled.schedule.read_busy):
                self._reschedule(index)
                return

    def _pop(self, cycle):
        while self._pending and self._pending[0][0] <= cycle:     # earlier effects first
            self._apply_pending()
        entry = self.ibuf.pop()
        self.pop_cycle = cycle
        # the oldest descriptors whose bursts were all issued before now: no command-engine
        # read to come can delay them any more
        while self.open and all(handshake < self.now for handshake, _ in self.open[0].schedule.read_busy):
            self.open.pop(0)
        queues = [q.copy() for q in self.regfile.queues]
        scheduled = _Scheduled(entry, queues[entry.queue], queues, cycle, self.state)
        self.open.append(scheduled)
        self._schedule(scheduled, compute_results=True)

    def _schedule(self, scheduled, compute_results):
        """(Re)compute a descriptor's schedule from the state it was scheduled from, and its effects."""
        schedule, self.state = self.control.execute(scheduled.entry, scheduled.regs, scheduled.queues, scheduled.pop,
                                                    scheduled.before, self._fetch_reads, compute_results)
        scheduled.schedule = schedule
        scheduled.generation += 1
        generation = scheduled.generation
        if compute_results:
            self._write(schedule.writes)

        def current(action):
            return lambda: action() if generation == scheduled.generation else None
        self._push(schedule.header_lands, current(lambda: self._write([schedule.header])))
        self._push(schedule.report + 1, current(lambda: self._complete(scheduled.entry, schedule)))

    def _reschedule(self, index):
        state = self.open[index].before
        for scheduled in self.open[index:]:
            scheduled.before = state
            self._schedule(scheduled, compute_results=False)
            state = self.state

    def _push(self, cycle, action):
        heapq.heappush(self._pending, (cycle, self._order, action))
        self._order += 1

    def _apply_pending(self):
        _, _, action = heapq.heappop(self._pending)
        action()

    def _write(self, writes):
        for addr, data in writes:
            self.memory.device_write(addr, data)

    def _complete(self, entry, schedule):
        # a completion line the DRAM refused: STATUS says so (hw/completion.py)
        slot, line = schedule.header
        refused = self.memory.faults.write_resp(slot, len(line)) != 0
        self.regfile.complete(entry.queue, entry.seq, int(completion.report_status(schedule.status, refused)))
        if self.regfile.queues[entry.queue].irq_en:
            self.irq_count[entry.queue] += 1

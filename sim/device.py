"""The cycle-approximate model of `ndp_device`: the blocks of hw/device.py, driven by
events instead of clock cycles.

Time only moves when the host lets it (`advance`). Each step is the earliest of: the
command engine fetching a slot, the control unit popping a descriptor (its whole
schedule is computed then, from sim/control_unit.py), or a completion taking effect.
A descriptor's result and completion reach DRAM at its COMPLETE cycle; HEAD, STATUS and
the interrupt follow when the completion write is answered, as in the RTL.
"""
import heapq

from . import command_engine, dram_reader
from .command_engine import CommandEngine
from .control_unit import ControlUnit
from .instruction_buffer import InstructionBuffer
from .memory import SparseMemory
from .regfile import RegisterFile
from . import dram_writer

NEVER = float("inf")


class NdpModel:
    def __init__(self, cfg):
        self.cfg = cfg
        self.now = 0
        self.memory = SparseMemory(cfg.dram_bytes)
        self.regfile = RegisterFile(cfg)
        self.engine = CommandEngine(cfg, self.memory)
        self.ibuf = InstructionBuffer(cfg.ibuf_depth)
        self.control = ControlUnit(cfg, self.memory)
        self.control_free = 0
        self._pending = []               # (cycle, order, action) completions taking effect
        self._order = 0
        self._read_busy = []             # (handshake, last beat) of the running descriptor's bursts
        self._fetch_reads = []           # (request, handshake, beat, control_first) of the command engine's reads
        self._control_first = False
        self._running = None             # (entry, regs, pop, schedule) of the newest popped descriptor
        # bumped at every (re)schedule; an effect of an older schedule is dropped. Only the
        # running descriptor can have effects pending: a pop first applies all earlier ones.
        self._generation = 0
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
            pop_at = max(self.control_free, head.ready)
            candidates.append((pop_at, lambda: self._pop(pop_at)))
        return min(candidates, key=lambda c: c[0]) if candidates else None

    def _pending_work(self, q):
        regs = self.regfile.queues[q]
        ahead = (regs.tail - (self.engine.next_seq[q] - 1)) & 0xFFFFFFFF
        return regs.enable and 0 < ahead < (1 << 31)

    def _wake(self, cycle):
        self.engine.idle_at = max(self.engine.idle_at, cycle)

    def _fetch_handshake(self, request):
        """The arbiter grants a fetch asking at `request` at once; or, while the control
        unit's reader has bursts in flight, two cycles after the last of them; or, when
        the reader asks in the same cycle and the fetch engine had the channel last
        (round-robin), after the reader's burst."""
        ends = [last for handshake, last in self._read_busy if handshake <= request <= last]
        self._control_first = False
        if not ends and self._last_grant_was_fetch(request):
            ends = [last for handshake, last in self._read_busy if handshake == request + 1]
            self._control_first = bool(ends)
        return max(ends) + dram_reader.GRANT_DELAY if ends else request + 1

    def _last_grant_was_fetch(self, request):
        fetches = [handshake for _, handshake, _, _ in self._fetch_reads if handshake <= request]
        bursts = [handshake for handshake, _ in self._read_busy if handshake <= request]
        return bool(fetches) and (not bursts or max(fetches) > max(bursts))

    def _fetch(self, cycle):
        q = self.engine.pick(self.regfile.queues, cycle)
        entry, arrival = self.engine.fetch(self.regfile.queues, q, cycle, self._fetch_handshake)
        self._steal((cycle + command_engine.ADDR_DELAY - 1, arrival - self.cfg.dram_read_latency, arrival,
                     self._control_first))
        if entry is None:
            return
        push = arrival + 1
        if self.ibuf.full():
            # PUSH waits for the control unit to pop the oldest entry
            head = self.ibuf.head()
            self._pop(max(self.control_free, head.ready))
            push = max(push, self.control_pop_cycle)
        self.ibuf.push(entry, push)
        self.engine.idle_at = push + 1

    def _steal(self, read):
        """A command-engine read holds the read channel: the running descriptor's later
        bursts wait for it, so its schedule is computed again."""
        self._fetch_reads = [r for r in self._fetch_reads if r[2] >= read[0] - 1024] + [read]
        if self._running is None:
            return
        entry, regs, pop, schedule = self._running
        if read[2] + 1 < pop or read[0] > schedule.complete:
            return
        if not any(handshake - 1 >= read[0] for handshake, _ in schedule.read_busy):
            return
        self._schedule(entry, regs, pop)

    def _pop(self, cycle):
        while self._pending and self._pending[0][0] <= cycle:     # earlier results land first
            self._apply_pending()
        entry = self.ibuf.pop()
        self.control_pop_cycle = cycle
        self._schedule(entry, self.regfile.queues[entry.queue], cycle)

    def _schedule(self, entry, regs, pop):
        """(Re)compute the schedule of the descriptor popped at `pop`, and its effects."""
        schedule = self.control.execute(entry, regs, pop, self._fetch_reads)
        self._running = (entry, regs, pop, schedule)
        self._generation += 1
        generation = self._generation
        self.control_free = schedule.free
        self._read_busy = schedule.read_busy
        done = schedule.free - 1            # the completion write answered: HEAD, STATUS, irq

        def current(action):
            return lambda: action() if generation == self._generation else None
        self._push(schedule.complete + dram_writer.ISSUE_DELAY + dram_writer.DATA_DELAY,
                   current(lambda: self._write(schedule.writes)))
        self._push(done, current(lambda: self._complete(entry, schedule)))

    def _push(self, cycle, action):
        heapq.heappush(self._pending, (cycle, self._order, action))
        self._order += 1

    def _apply_pending(self):
        _, _, action = heapq.heappop(self._pending)
        action()

    def _write(self, writes):
        for addr, data in writes:
            self.memory.write(addr, data)

    def _complete(self, entry, schedule):
        self.regfile.complete(entry.queue, entry.seq, int(schedule.status))
        if self.regfile.queues[entry.queue].irq_en:
            self.irq_count[entry.queue] += 1

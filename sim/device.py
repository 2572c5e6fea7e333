"""The cycle-approximate model of `ndp_device`: the blocks of hw/device.py, driven by
events instead of clock cycles.

Time only moves when the host lets it (`advance`). Each step is the earliest of: the
command engine fetching a slot, the front end popping a descriptor (its whole schedule is
computed then, from sim/control_unit.py, after the schedules of the descriptors before
it), or an effect taking place (a completion line landing, HEAD, STATUS and the interrupt
when it is answered). A descriptor's result bytes are in the model's memory from its
schedule on (the host reads them only after the completion; a timing-only model writes
none, see NdpModel); its completion line lands when the RTL writes it.

The front end runs ahead of the control unit, so several descriptors' reads can be in
flight; a command-engine read that the arbiter takes among their bursts delays the later
ones, so every descriptor with a burst after it is scheduled again, in order, from the
state the one before it left. A paged ATTENTION's list, read among the runs of the
descriptor before it (sim/control_unit.py), has that one scheduled again the same way.
"""
import collections
import heapq

from . import command_engine, completion, dram_arbiter, dram_interleaver
from .command_engine import CommandEngine
from .control_unit import ControlUnit, State
from .instruction_buffer import InstructionBuffer
from .memory import PAGE, TIMING_PAGE, SparseMemory
from .regfile import RegisterFile

NEVER = float("inf")
STEAL_HORIZON = 1 << 12     # command-engine reads older than this (cycles) no longer matter


class _Scheduled:
    """A descriptor whose schedule may still change: what it was scheduled from, and its schedule."""

    def __init__(self, entry, regs, queues, pop, before):
        self.entry, self.regs, self.queues, self.pop, self.before = entry, regs, queues, pop, before
        self.schedule = None
        self.generation = 0
        self.newest = None              # its bursts' newest handshake (None: no burst)
        self.latest = None              # ... and latest last beat
        self.next_list = None           # the next descriptor's list read among its runs (request, address, lines)

    def set(self, schedule):
        self.schedule = schedule
        self.generation += 1
        busy = schedule.read_busy
        self.newest = max(h for h, _ in busy) if busy else None
        self.latest = max(last for _, last in busy) if busy else None


class NdpModel:
    """The device. With `compute_results` false it is a timing-only model: every schedule
    and cycle is the same, but the compute unit computes no result and writes none to
    memory; completion lines are written as ever (the host polls them), and LOAD and STORE
    still copy their lines (no arithmetic, and a STORE may write what the command engine
    reads). It exists for replays whose operands are placed but not filled (a whole
    model's KV cache does not fit in host RAM): no cycle depends on an operand's values."""

    def __init__(self, cfg, compute_results=True):
        self.cfg = cfg
        self.compute_results = compute_results
        self.now = 0
        # a timing-only model holds little but scattered bytes (rings, page lists over a
        # whole KV cache's addresses): 4 KiB of host memory each, not a MiB
        self.memory = SparseMemory(cfg.dram_bytes, PAGE if compute_results else TIMING_PAGE)
        self.regfile = RegisterFile(cfg)
        self.engine = CommandEngine(cfg, self.memory)
        self.ibuf = InstructionBuffer(cfg.ibuf_depth)
        self.control = ControlUnit(cfg, self.memory)
        self.state = State.initial(cfg)  # what the newest scheduled descriptor leaves
        self.open = []                   # scheduled descriptors a command-engine read may still delay
        self._pending = []               # (cycle, order, action) effects taking place
        self._awaiting = collections.deque()    # scheduled descriptors not yet completed, in pop order
        self._order = 0
        # (request, handshake, beat, control_first, channel) of the command engine's reads
        self._fetch_reads = ()
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
            step[1](*step[2])
        self.now = max(self.now, until)

    def next_event_cycle(self):
        step = self._next_event()
        return NEVER if step is None else step[0]

    def _next_event(self):
        """(cycle, action, its arguments) of the earliest step, or None; on a tie, an effect
        goes first, then the command engine, then the pop. The command engine's step is
        at fetch_at or later, so it is not looked for when an effect comes no later."""
        step = (self._pending[0][0], self._apply_pending, ()) if self._pending else None
        fetch_at = max(self.engine.idle_at, self.now)
        if step is None or fetch_at < step[0]:
            if self.engine.pick(self.regfile.queues, fetch_at) is not None:
                step = (fetch_at, self._fetch, (fetch_at,))
            else:
                # a queue in back-off becomes eligible again later
                waits = [b for q, b in enumerate(self.engine.backoff_until) if b > fetch_at
                         and self._pending_work(q)]
                if waits and (step is None or min(waits) < step[0]):
                    step = (min(waits), self._wake, (min(waits),))
        head = self.ibuf.head()
        if head is not None:
            pop_at = max(self.state.front_free, head.ready)
            if step is None or pop_at < step[0]:
                step = (pop_at, self._pop, (pop_at,))
        return step

    def _pending_work(self, q):
        regs = self.regfile.queues[q]
        ahead = (regs.tail - (self.engine.next_seq[q] - 1)) & 0xFFFFFFFF
        return regs.enable and 0 < ahead < (1 << 31)

    def _wake(self, cycle):
        self.engine.idle_at = max(self.engine.idle_at, cycle)

    def _bursts(self, request):
        """The bursts of the descriptors scheduled and open: (handshake, last beat) of each
        from cycle `request` on, and (the newest handshake, the latest last beat) of those
        before it, or None. Only those two of the earlier bursts matter to a read asking
        from `request` on, and whole descriptors before it are summed up in them."""
        later, newest, latest = [], None, None
        for scheduled in self.open:
            if scheduled.newest is None:
                continue
            if scheduled.newest < request:
                earlier = [(scheduled.newest, scheduled.latest)]
            else:
                earlier = []
                for burst in scheduled.schedule.read_busy:
                    (later if burst[0] >= request else earlier).append(burst)
            for handshake, last in earlier:
                newest = handshake if newest is None else max(newest, handshake)
                latest = last if latest is None else max(latest, last)
        return later, None if newest is None else (newest, latest)

    def _fetch_handshake(self, request):
        """(handshake, beat) of a command-engine read asking from cycle `request`."""
        later, earlier = self._bursts(request)
        self._control_first = self._last_grant_was_fetch(request, later, earlier)
        # the earlier bursts as one: the arbiter's pick looks at handshakes from `request`
        # on, the read's beat at the latest last beat before its handshake
        bursts = later + [earlier] if earlier is not None else later
        return dram_arbiter.engine_grant(request, bursts, self._control_first, self.cfg)

    def _last_grant_was_fetch(self, request, later, earlier):
        fetches = [read[1] for read in self._fetch_reads if read[1] <= request]
        bursts = [handshake for handshake, _ in later if handshake <= request] + ([earlier[0]] if earlier else [])
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
        self._fetch_reads = tuple(r for r in self._fetch_reads if r[2] >= read[0] - STEAL_HORIZON) + (read,)
        for index, scheduled in enumerate(self.open):
            if scheduled.newest is not None and scheduled.newest >= read[0]:
                self._reschedule(index)
                return

    def _pop(self, cycle):
        while self._pending and self._pending[0][0] <= cycle:     # earlier effects first
            self._apply_pending()
        entry = self.ibuf.pop()
        self.pop_cycle = cycle
        # the oldest descriptors whose bursts were all issued before now: no command-engine
        # read to come can delay them any more (the newest stays: the next list may join it)
        while len(self.open) > 1 and (self.open[0].newest is None or self.open[0].newest < self.now):
            self.open.pop(0)
        queues = [q.copy() for q in self.regfile.queues]
        # a paged ATTENTION's list asks for the reader while the descriptor before it is in
        # slot 1: when that one has a run that begins something from then on, the list is
        # read there, before its later runs, and its schedule is made again
        request = self.control.list_request(entry, queues[entry.queue], queues, cycle, self.state)
        if request is not None and self.open and self.state.last_point >= request:
            self.open[-1].next_list = (request, entry.desc.dev_addr, entry.desc.dev_size)
            self._reschedule(len(self.open) - 1)
        scheduled = _Scheduled(entry, queues[entry.queue], queues, cycle, self.state)
        self.open.append(scheduled)
        self._awaiting.append(scheduled)
        self._schedule(scheduled, first=True)

    def _schedule(self, scheduled, first):
        """(Re)compute a descriptor's schedule from the state it was scheduled from, and its
        effects; its results (`first`: its first schedule) are computed and written once."""
        schedule, self.state = self.control.execute(scheduled.entry, scheduled.regs, scheduled.queues, scheduled.pop,
                                                    scheduled.before, self._fetch_reads,
                                                    compute_results=first and self.compute_results, first=first,
                                                    next_list=scheduled.next_list)
        scheduled.set(schedule)
        generation = scheduled.generation
        if first:
            self._write(schedule.writes)

        def current(action):
            return lambda: action() if generation == scheduled.generation else None
        self._push(schedule.header_lands, current(lambda: self._write([schedule.header])))
        self._push(schedule.report + 1, current(lambda: self._complete(scheduled.entry, schedule)))

    def _reschedule(self, index):
        state = self.open[index].before
        for scheduled in self.open[index:]:
            scheduled.before = state
            self._schedule(scheduled, first=False)
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

    def next_completion_cycle(self, queue):
        """The cycle the queue's next completion takes effect as scheduled now (None if none
        of its descriptors is scheduled): no interrupt of the queue comes earlier, since a
        device completes in order and a re-schedule only delays (sim/control_unit.py)."""
        for scheduled in self._awaiting:
            if scheduled.entry.queue == queue:
                return scheduled.schedule.report + 1
        return None

    def _complete(self, entry, schedule):
        if self._awaiting and self._awaiting[0].entry is entry:
            self._awaiting.popleft()
        else:
            self._awaiting = collections.deque(s for s in self._awaiting if s.entry is not entry)
        # a completion line the DRAM refused: STATUS says so (hw/completion.py)
        slot, line = schedule.header
        refused = self.memory.faults.write_resp(slot, len(line)) != 0
        self.regfile.complete(entry.queue, entry.seq, int(completion.report_status(schedule.status, refused)))
        if self.regfile.queues[entry.queue].irq_en:
            self.irq_count[entry.queue] += 1

"""Model of hw/control_unit.py and hw/front_end.py: one descriptor's schedule, results
and completion, given what the descriptors before it left (`State`).

The front end holds two descriptors (hw/front_end.py): the next one (slot 2) and the one
whose runs it starts (slot 1). Slot 2 pops the descriptor (cycle `pop`), decodes it over
the next DECODE_STAGES cycles (DECODE, then CHECK, in which the decoder's verdict is
known) and, from the cycle after (or, on a hazard, sim's `hazard_until` as
hw/front_end.py's rule, from the cycle after the report that clears it), is READY; a
paged ATTENTION first reads and checks its list (`_page_list`). The list's run asks for
the reader from then on, and takes it when slot 1's fetcher is at a run that begins
something (an input run, a copy, a stage's first run: `_point`) or has started its last
run: so the next descriptor's list is usually read among this one's runs, before its
pages (the previous descriptor's schedule is then made again with the list in it:
sim/device.py). A READY descriptor moves to slot 1 once slot 1's descriptor has started
its last run and the queue of tasks has room (the task TASK_QUEUE before it taken); its
runs start from the cycle after, each once the reader has issued the previous run's
bursts (the previous descriptor's included), and slot 2 pops again from then on.

The control unit takes the descriptor's task in IDLE (from the cycle after the move to
slot 1, once it is idle); its DECODE takes one cycle; an error (a paged ATTENTION's list
verdict included) goes straight to COMPLETE. LOAD/STORE start the writer
(once it is free) on the reader's lines and go to COMPLETE when it has written them.
GEMM runs per group of ROWS input rows: the input phase (unpacker into the input buffer),
the weight phase (unpacker through the PE array: the k-groups of whole packs, then the
last k-group as a run of its own, isa/pe_array.py; one input row: slots of paired
chunks), DRAIN until the last sums are written, then READOUT: the words through the fold
unit (sim/fold_unit.py), into the buffers or through the line packer (sim/line_packer.py)
into one write run per group (sim/dram_writer.py). A write job starts only when the
writer is free: idle, and no completion waiting for its line. COMPLETE leaves the
completion waiting (once the previous one's line is out); its line is written once every
write before it has been answered (the writer quiet), and HEAD moves when that line is
answered.
"""
import dataclasses

import numpy as np

from isa import Status, Op
from isa.descriptor import Flag, PAGE_ENTRY_BYTES
from isa.pe_array import Route
from isa.microarch import DECODE_STAGES, LANE_ROW_STAGES, REPORTS_IN_FLIGHT, TASK_QUEUE
from isa import validate
from isa.slots import HEADER_BYTES, LINE_BYTES
from isa.validate import lines, stats_offset
from . import (chunk_dispatch, completion, dram_reader, dram_writer, line_packer, readout,
               softmax_unit, stage_planner, unpacker)
from .compute_unit import ComputeUnit
from .decoder import decode

DECODE_CYCLES = 2        # the control unit's take -> first cycle of its next state (DECODE in between)
STAGE_CYCLES = 2         # STAGE, PLAN: before a stage's WEIGHTS_START
BANK_START_CYCLES = 1    # BANK_START: SOFTMAX's write run starts, then BANK_OUT
SFU_START_CYCLES = 1     # SFU_START, before the unit's own cycles (sim/softmax_unit.py)
LANES_READY_AFTER = LANE_ROW_STAGES + 1     # the compute unit's n_cols changes -> lanes_ready
CACHE_ENTRIES = 1 << 12  # entries of each of the control unit's caches (cleared when full)


@dataclasses.dataclass
class State:
    """What a descriptor's schedule takes from the descriptors before it."""
    reader: object                      # sim/dram_reader.Reader, across descriptors
    writer: object                      # sim/dram_writer.Writer, across descriptors
    front_free: int = 0                 # first cycle the front end's slot 2 can pop
    slot1_free: int = 0                 # first cycle slot 1 has no run left to start
    takes: tuple = (-1,) * TASK_QUEUE   # the control unit's takes of the last TASK_QUEUE tasks
    fetch_off: int = 0                  # first cycle slot 1's fetcher has no run left to start
    last_point: int = -1                # the cycle of the newest run that begins something (`_point`)
    next_list: object = None            # the next descriptor's list's beat arrivals, when read among this one's runs
    fsm_free: int = 0                   # first cycle the control unit is in IDLE
    pending_free: int = 0               # first cycle no completion waits for its line
    readout_free: int = 0               # first cycle the readout (hw/readout.py) is free
    pipe_mode: tuple = ("normal",)      # the compute unit's mode (plain, or a transposed tree's)
    pipe_empty: int = 0                 # the cycle its pipeline holds no chunk's control (pipe_busy 0)
    stage: int = 0                      # the FSM's `stage` register (0 at reset)
    lanes_n: int = 0                    # the N the lanes' packed rows follow (the compute unit's n_cols)
    lanes_since: int = -LANE_ROW_STAGES - 1     # ... since this cycle (its first)
    last_report: int = -1               # the newest report (completion line answered)
    last_store_report: int = -1         # ... of a STORE that ran
    reports: tuple = ()                 # the last REPORTS_IN_FLIGHT report cycles

    @classmethod
    def initial(cls, cfg):
        return cls(dram_reader.Reader(cfg), dram_writer.Writer(cfg))

    def copy(self):
        # every field but the reader and the writer is immutable; those two copy what
        # a schedule changes in place (a deepcopy would also copy the config, and cost
        # more than the schedule)
        new = State.__new__(State)
        new.__dict__.update(self.__dict__)
        new.reader, new.writer = self.reader.copy(), self.writer.copy()
        return new


@dataclasses.dataclass
class Schedule:
    take: int                           # the control unit takes the descriptor
    complete: int                       # the completion line's write starts: `cycles` end here
    status: Status
    writes: list                        # (addr, bytes) the descriptor writes before its completion
    header: tuple                       # (addr, bytes) of the completion line
    header_lands: int                   # the cycle the completion line's beat is written
    report: int                         # the completion line answered: HEAD, STATUS, irq next cycle
    read_busy: list                     # (handshake, last beat) of each of the reader's bursts


def hazard_until(desc, kind, status, sq_slot, regs, queues, state):
    """The cycle from which the front end may start the descriptor's reads (hw/front_end.py):
    after every earlier STORE's report, and, when it reads inside an enabled queue's CQ
    ring, after every earlier descriptor's."""
    clear = state.last_store_report + 1
    slot_end = sq_slot + (1 << regs.log2_slot)
    dev_end = desc.dev_addr + desc.dev_size * LINE_BYTES
    for q in queues:
        if not q.enable:
            continue
        end = q.ring_end(q.cq_base)
        if (sq_slot < end and q.cq_base < slot_end) or (desc.dev_size and desc.dev_addr < end
                                                        and q.cq_base < dev_end):
            clear = max(clear, state.last_report + 1)
    return clear


def lanes_n(desc, stage):
    """The N of stage `stage` of `desc` as hw/stage_plan.py stage_operand gives it to the
    lanes (any op: the FSM shows the task register's fields whatever it holds); a decode
    step's S V's throughout (hw/control_unit.py decode_unit, from the same fields)."""
    trans = bool(desc.flags & Flag.TRANS_W)
    n0, k0 = (desc.dev_rows, desc.dev_cols) if trans else (desc.dev_cols, desc.dev_rows)
    decode_unit = desc.op == Op.ATTENTION and trans and desc.in_rows == 1
    return k0 if stage or decode_unit else n0


class ControlUnit:
    def __init__(self, cfg, memory):
        self.cfg = cfg
        self.memory = memory
        self.reads = []                 # (address, bytes) of every run the reader made
        self.compute = ComputeUnit(memory, cfg.lanes, cfg.softmax_lanes)
        dram_reader.load_kernels(cfg)
        self._decoded, self._shapes, self._words = {}, {}, {}   # caches: see _decode, _shape, _word_bytes
        self._steals_of = self._steals_array = None             # ... and _steal_array

    def list_request(self, entry, regs, queues, pop, state):
        """The cycle a paged ATTENTION popped at `pop` into slot 2 first asks for its list's
        run (the cycle after CHECK, or after its hazard clears), or None: not paged, or its
        decode failed."""
        status, kind = self._decode(entry.desc, regs)
        if status != Status.OK or not validate.paged(entry.desc):
            return None
        return self._ready(entry, regs, queues, pop, state, status, kind)

    def _ready(self, entry, regs, queues, pop, state, status, kind):
        """Slot 2's first cycle after CHECK and the hazard (READY, or the list's request)."""
        ready = pop + DECODE_STAGES
        if status == Status.OK:
            sq_slot = regs.slot_addr(regs.sq_base, entry.seq)
            ready = max(ready, hazard_until(entry.desc, kind, status, sq_slot, regs, queues, state))
        return ready + 1

    def execute(self, entry, regs, queues, pop, state, steals=(), compute_results=True, first=None,
                next_list=None):
        """The schedule of `entry` popped by the front end at cycle `pop` on a queue with
        registers `regs` (`queues`: every queue's), after the descriptors that left `state`
        (not changed); `steals` are the command engine's reads among the reader's bursts.
        Returns (schedule, the state it leaves). With `compute_results` false the result
        bytes of a read-compute descriptor are not computed (no cycle depends on them).
        `first` (default: compute_results) is the descriptor's first schedule, whose reads
        are recorded (`reads`) and whose LOAD or STORE copy goes into the writes; a
        re-schedule only changes the times. `next_list` (request cycle, address, lines):
        the next descriptor's list, read at this one's first run that begins something
        from that cycle on (`_point`), if there is one."""
        desc = entry.desc
        state = state.copy()
        # the steals as every run of the descriptor takes them, converted once
        self._steals, self._state, self._results = self._steal_array(steals), state, compute_results
        self._first = compute_results if first is None else first
        self._next_list = next_list
        status, kind = self._decode(desc, regs)
        self._runs = []                 # (address, bytes) of the descriptor's reader runs
        state.writer.jobs = []          # and of its write jobs
        sq_slot, cq_slot = regs.slot_addr(regs.sq_base, entry.seq), regs.slot_addr(regs.cq_base, entry.seq)
        # slot 2: DECODE, CHECK, then (hazard permitting) READY, or the list's request
        ready = self._ready(entry, regs, queues, pop, state, status, kind)
        listed, state.next_list, state.last_point = state.next_list, None, -1
        busy, writes = [], []
        self._pages = None
        verdict = None
        if status == Status.OK and validate.paged(desc):
            verdict, status = self._page_list(desc, regs, busy, ready, listed)
            ready = verdict
        # the move to slot 1, once the descriptor there has started its last run and the
        # queue of tasks has room (the task TASK_QUEUE before this one taken)
        move = max(ready, state.slot1_free, state.takes[0] + 1)
        self._fetch_from = move + 1
        take = max(move + 1, state.fsm_free)
        start = take + DECODE_CYCLES
        # from the cycle after the take the lanes follow this descriptor's N (whatever its op)
        self._lanes_follow(lanes_n(desc, state.stage), take + 1)
        state.takes = state.takes[1:] + (take,)
        fetched = status == Status.OK
        if status != Status.OK:
            complete = start
        elif kind in ("load", "store"):
            src, dst = ((desc.dev_addr, cq_slot + HEADER_BYTES) if kind == "load"
                        else (sq_slot + HEADER_BYTES, desc.dev_addr))
            complete = self._copy(max(start, self._writer_free(), self._readout_free()), src, dst, desc.dev_size,
                                  busy)
            if self._first:
                writes.append((dst, self.memory.read(src, desc.dev_size * LINE_BYTES)))
        else:
            complete = self._compute(start, desc, sq_slot, cq_slot + HEADER_BYTES, busy, writes)
        # COMPLETE leaves the completion waiting once the previous one's line is out; its
        # line waits for the writer, busy with the results' run until the readout is done
        complete = max(complete, state.pending_free)
        state.fsm_free = complete + 1
        state.front_free = move + 1
        # slot 1's fetcher stops in the cycle after its last run's start (none: at the move)
        state.fetch_off = self._fetch_from if fetched else move + 1
        state.slot1_free = state.fetch_off
        status = completion.status(status, status == Status.OK and self._dram_error(state.writer.jobs))
        # the completion line: every write before it answered, a report slot free
        line_start = completion.line_start(complete, state.writer.quiet_at(), state.reports)
        lands, report = state.writer.line(line_start, cq_slot)
        state.pending_free = line_start + 1
        header = completion.line(entry.seq, status, line_start - entry.taken)
        state.last_report = report
        if status == Status.OK and kind == "store":
            state.last_store_report = report
        state.reports = (state.reports + (report,))[-REPORTS_IN_FLIGHT:]
        schedule = Schedule(take, line_start, status, writes, (cq_slot, header), lands, report, busy)
        return schedule, state

    def _page_list(self, desc, regs, busy, request, listed):
        """A paged ATTENTION's list (hw/front_end.py slot 2, LIST_REQ .. LIST_CHECK): its run
        asks for the reader from cycle `request`; `listed` is its run when the previous
        descriptor's schedule read it among its own runs, else it starts once slot 1's
        fetcher has started its last run and the reader has issued its bursts. Its beats go
        to the front end as they arrive (the cycle after the last one it has them all),
        then an entry is checked a cycle; the verdict is visible in the cycle after the last
        entry's check (READY). Returns (that cycle, the status: DRAM_ERROR when a beat of
        the list was answered with an error, BAD_PAGE for a bad entry, else OK); keeps the
        pages."""
        count = validate.page_count(desc)
        raw = self.memory.read(desc.dev_addr, count * PAGE_ENTRY_BYTES)
        entries = [int.from_bytes(raw[8 * i:8 * i + 8], "little") for i in range(count)]
        self._runs.append((desc.dev_addr, desc.dev_size * LINE_BYTES))
        if self._first:
            self.reads.append((desc.dev_addr, desc.dev_size * LINE_BYTES))
        if listed is None:
            reader = self._state.reader
            start = max(request, self._state.fetch_off)
            if reader.issued_all is not None:
                start = max(start, reader.issued_all)
            handshakes, lengths, arrivals, _ = dram_reader.side_run(start, desc.dev_addr, desc.dev_size, self.cfg,
                                                                    self._steals, reader)
            busy.extend(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
        else:
            arrivals = listed
        verdict = int(arrivals[-1]) + 2 + count
        faults = self.memory.faults
        if faults and faults.read_resp(desc.dev_addr, desc.dev_size * LINE_BYTES):
            return verdict, Status.DRAM_ERROR
        view = validate.QueueView(regs.log2_slot, regs.data_base, regs.data_limit)
        status = validate.check_pages(desc, entries, view, self.cfg)
        if status == Status.OK:
            self._pages = entries
        return verdict, status

    def _point(self, start, busy, needs_reader=True):
        """Slot 1's fetcher at a run that begins something (an input run, a copy, a stage's
        first run), which it would start at `start` (`needs_reader` false: an empty run,
        stepped over without the reader): the next descriptor's list, when it asks by then,
        takes the reader first (hw/front_end.py). Returns the cycle the run may start."""
        state = self._state
        state.last_point = start
        if self._next_list is None or self._next_list[0] > start:
            return start
        _, addr, lines_ = self._next_list
        self._next_list = None
        reader = state.reader
        if reader.issued_all is not None:
            start = max(start, reader.issued_all)
        handshakes, lengths, arrivals, _ = dram_reader.side_run(start, addr, lines_, self.cfg, self._steals, reader)
        busy.extend(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
        state.next_list = arrivals
        return max(start + 1, reader.issued_all) if needs_reader else start + 1

    def _steal_array(self, steals):
        """dram_reader.steal_array, once per tuple of steals (the device's tuple changes
        only when the command engine reads)."""
        if type(steals) is not tuple:
            return dram_reader.steal_array(steals)
        if steals is not self._steals_of:
            self._steals_of, self._steals_array = steals, dram_reader.steal_array(steals)
        return self._steals_array

    def _decode(self, desc, regs):
        """sim/decoder.decode, once per descriptor and queue layout: a re-schedule, or a
        stream of like descriptors, decodes the same."""
        key = (desc, regs.log2_slot, regs.data_base, regs.data_limit)
        decoded = self._decoded.get(key)
        if decoded is None:
            if len(self._decoded) >= CACHE_ENTRIES:
                self._decoded.clear()
            decoded = self._decoded[key] = decode(desc, regs, self.cfg)
        return decoded

    def _shape(self, desc):
        """What a read-compute descriptor's schedule takes of its shape alone, not of its
        addresses: its products (K, N, transposed), values per result row and the anchors'
        offset; once per shape (a stream of small descriptors repeats a few)."""
        key = (desc.op, desc.dtype, desc.flags, desc.dev_rows, desc.dev_cols, desc.in_rows, desc.in_cols)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= CACHE_ENTRIES:
                self._shapes.clear()
            shape = self._shapes[key] = (validate.stages(desc), validate.result_cols(desc), stats_offset(desc))
        return shape

    def _copy(self, start, src, dst, lines_, busy):
        """COPY_START (at `start`, the writer free) .. COPY: the source's lines through the
        unpacker (one row of 32 elements a line) and the line packer, which realign them to
        the destination's slots, into the writer; the unpacker holds a slot back while the
        packer has no room for it. Returns the COMPLETE cycle."""
        cfg, lanes = self.cfg, self.cfg.lanes
        offset, cols = (src % cfg.beat_bytes) // 2, lines_ * 32
        ends = unpacker.slot_ends(offset, 1, cols, lanes)
        last_beats = unpacker.last_beats(ends, lanes)
        word_bytes = 2 * np.diff(np.concatenate([[offset], ends]))
        final = []

        def through(shown, writer):
            available = np.maximum(shown, start + 1)
            index = np.arange(len(available), dtype=np.int64)
            ready = (index + np.maximum.accumulate(available - index))[last_beats] + 1
            writer.stream(start, dst, lines_)
            packer = line_packer.Run(dst % cfg.beat_bytes, word_bytes, cfg.beat_bytes,
                                     lambda i, shown_at: writer.take(shown_at))
            times, t = [], start
            for i, r in enumerate(ready.tolist()):
                t = packer.take_word(i, max(r, t + 1))
                times.append(t)
            times = np.array(times, np.int64)
            final[:] = [writer]
            return unpacker.pull_times(available, times, ends, lanes)

        self._read(src, lines_, busy, lambda shown: through(shown, self._state.writer.copy()), start + 1)
        self._state.writer = final[0]
        return max(start + 1, self._state.writer.idle_at) + 1

    def _dram_error(self, write_jobs):
        """Whether the DRAM answers an error to one of the descriptor's reads or writes
        (sim/memory.py DramFaults): its completion then says DRAM_ERROR."""
        faults = self.memory.faults
        return bool(faults) and (any(faults.read_resp(addr, n) for addr, n in self._runs)
                                 or any(faults.write_resp(addr, n) for addr, n in write_jobs))

    def _readout_free(self):
        """First cycle the readout may take a job."""
        return self._state.readout_free

    def _writer_free(self):
        """First cycle the writer may take one of the control unit's jobs."""
        return max(self._state.writer.idle_at, self._state.pending_free)

    def _read(self, addr, lines_, busy, consumer, floor=0, point=True):
        """The descriptor's next reader run (`lines_` lines from the line at `addr`), for
        `consumer` (see sim/dram_reader.run), started as the fetcher does: once the reader
        has issued the previous run's last burst, and a cycle after the previous start (or
        skipped run) at the earliest; `point`: a run that begins something (`_point`).
        Records its bursts."""
        self._runs.append((addr, lines_ * LINE_BYTES))
        if self._first:
            self.reads.append((addr, lines_ * LINE_BYTES))
        reader = self._state.reader
        start = self._fetch_from
        if reader.issued_all is not None:
            start = max(start, reader.issued_all)
        if point:
            start = self._point(start, busy)
        self._fetch_from = start + 1
        run = dram_reader.run(start, addr, lines_, self.cfg, consumer, self._steals, reader, floor)
        handshakes, lengths, arrivals, _ = run
        # each burst is in flight from its address handshake to its last beat
        busy.extend(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
        return run

    def _phase(self, start, base, elem, rows, cols, busy, pair=False, runs=None, point=True):
        """A reader run (fetched ahead) through the unpacker started at `start`: `rows` x
        `cols` FP16 elements from element `elem` of the array at `base`; returns the cycle
        after its last slot. `runs` [(address, lines)]: the DRAM runs its beats come from
        instead (a paged stage; `base` is then virtual, for the unpacker's offsets).
        `point`: its (first) run begins something (`_point`)."""
        cfg, lanes = self.cfg, self.cfg.lanes
        first = base + 2 * elem                      # its first element's byte (hw/stage_plan.py run_span)
        addr, lines_ = first - first % LINE_BYTES, -(-(first % LINE_BYTES + 2 * rows * cols) // LINE_BYTES)
        offset = (first % cfg.beat_bytes) // 2
        # beats fetched ahead wait in the buffer until the unpacker is active
        unpack = unpacker.Consumer(*unpacker.slots(offset, rows, cols, lanes, pair), lanes, start + 1)
        if runs is None:
            self._read(addr, lines_, busy, unpack, start + 1, point)
        else:
            self._gather(runs, busy, unpack, start + 1, point)
        return int(unpack.times[-1]) + 1

    def _gather(self, runs, busy, consumer, floor, point):
        """_read for one unpacker job over several runs, the fetcher starting each once the
        reader has issued the previous one's bursts (sim/dram_reader.py gather_run)."""
        for addr, lines_ in runs:
            self._runs.append((addr, lines_ * LINE_BYTES))
            if self._first:
                self.reads.append((addr, lines_ * LINE_BYTES))
        reader = self._state.reader
        start = self._fetch_from
        if reader.issued_all is not None:
            start = max(start, reader.issued_all)
        if point:
            start = self._point(start, busy)
        handshakes, lengths, arrivals, _ = dram_reader.gather_run(start, runs, self.cfg, consumer, self._steals,
                                                                  reader, floor)
        busy.extend(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
        # the last run started the cycle after the run before it issued its last burst
        bursts_before = sum(len(dram_reader.burst_lengths(a, n, self.cfg)) for a, n in runs[:-1])
        self._fetch_from = (int(handshakes[bursts_before - 1]) + 2) if len(runs) > 1 else start + 1

    def _compute(self, start, desc, sq_slot, out_addr, busy, writes):
        """A read-compute descriptor from GROUP on: per group of ROWS input rows, the input,
        the op's stages, its softmax rows and result runs (as hw/control_unit.py's FSM).
        Appends the result writes; returns the COMPLETE cycle."""
        cfg, lanes, op = self.cfg, self.cfg.lanes, desc.op
        m = desc.in_rows
        in_addr, cols = sq_slot + HEADER_BYTES, desc.in_cols
        partial = bool(desc.flags & Flag.PARTIAL)
        second = desc.dev_addr + lines(desc.dev_rows * desc.dev_cols * 2) * LINE_BYTES
        products, out_n, stats = self._shape(desc)    # (K, N, transposed) of each product
        # (address, K, N, transposed, whether its words are the results)
        # a paged ATTENTION's stages stream as one operand's from virtual address 0 (each
        # page whole 4 KiB: the unpacker's offsets are the same), read from the pages
        bases = (0, 0) if self._pages else (desc.dev_addr, second)
        stages = [(addr, sk, sn, trans, i == len(products) - 1)
                  for i, (addr, (sk, sn, trans)) in enumerate(zip(bases, products))]
        esize = 4 if op == Op.ATTENTION else 2
        anchors = op == Op.ATTENTION or (op == Op.SOFTMAX and partial)
        sfu_length = cols if op == Op.SOFTMAX else (products[0][1] if op == Op.ATTENTION else 0)
        if self._results:
            self._results_of(desc, in_addr, out_addr, second, partial, anchors, writes)

        decode = validate.decode_attention(desc)
        t = start
        for m0 in range(0, m, cfg.rows):
            # GROUP (cycle t) sets the stage register to 0
            self._state.stage = 0
            self._lanes_follow(lanes_n(desc, 0), t + 1)
            rows = min(cfg.rows, m - m0)
            in_elem = m0 * cols
            t = self._phase(t, in_addr, in_elem, rows, cols, busy)
            # the group's results: bytes m0 * out_n * esize on
            run = out_addr + m0 * out_n * esize
            for index, (addr, sk, sn, trans, to_result) in enumerate(stages):
                route = Route.of_stage(m, trans, index if decode else None)
                plan = stage_planner.plan_stage(sk, sn, trans, m, lanes, route)
                # DRAIN, from the cycle after the last chunk, hands the readout over once
                # the readout (and, for results, the writer) is free; the readout starts
                # in the cycle its last sums are written (`drained`) at the earliest.
                # Results go out beside what follows (from the next cycle on), a chain's
                # words are waited for
                after, latency = self._stage(t + STAGE_CYCLES, addr, plan, route is Route.SPLIT, busy,
                                             self._page_runs(desc, index, plan))
                drained = after + latency - 1
                if op == Op.LORA_XAB and not to_result:
                    # x A's DRAIN and READOUT_WAIT already show the lanes . B's N
                    self._lanes_follow(lanes_n(desc, 1), after)
                handed = max(after, self._readout_free(), self._writer_free() if to_result else 0)
                start_at = max(drained, handed)
                done = self._readout(start_at + 1, self._word_bytes(rows, sn, esize),
                                     plan.fold_steps, run if to_result else None)
                if not to_result:
                    # the chain's words are in: the stage register moves to 1
                    self._state.stage = 1
                    self._lanes_follow(lanes_n(desc, 1), done + 1)
                t = handed + 1 if to_result else done + 1
                if op == Op.ATTENTION and not to_result:
                    # the softmax rows: S V starts once the last row's probabilities are
                    # written, and the anchor lines go out once the unit is idle again
                    done = softmax_unit.cycles(sfu_length, True, cfg)
                    written = softmax_unit.written_cycles(sfu_length, cfg)
                    t += (rows - 1) * (SFU_START_CYCLES + done)  # the last row's SFU_START
                    self._anchors(t + SFU_START_CYCLES + done, out_addr + stats + m0 * LINE_BYTES, rows)
                    # (a row of length 0 writes nothing: `done` at once)
                    t += SFU_START_CYCLES + (done if written is None else written)
            if op == Op.SOFTMAX:
                t += rows * (SFU_START_CYCLES + softmax_unit.cycles(sfu_length, partial, cfg))
                t = max(t, self._writer_free(), self._readout_free()) + BANK_START_CYCLES
                t = self._readout(t, self._word_bytes(rows, cols, 2), None, run) + 1
            if op == Op.SOFTMAX and partial:
                t = self._anchors(t, out_addr + stats + m0 * LINE_BYTES, rows)
            t += 1                                                        # GROUP_END
        return t

    def _anchors(self, t, addr, rows):
        """The anchor poster (from cycle t, once the writer and the readout are free) starts
        a row's line of (m, l) at `addr` on, the next row's from the next cycle (the writer
        latched the line); returns the cycle after the last row's."""
        writer = self._state.writer
        for r in range(rows):
            start = max(t, self._writer_free(), self._readout_free())
            writer.line(start, addr + r * LINE_BYTES)
            t = start + 1
        return t

    def _results_of(self, desc, in_addr, out_addr, second, partial, anchors, writes):
        """The result bytes of a read-compute descriptor (the golden model), into `writes`."""
        m, cols, op = desc.in_rows, desc.in_cols, desc.op
        (k, n, trans), *_ = validate.stages(desc) or [(0, 0, False)]
        anchors_m = anchors_l = None
        if op == Op.SOFTMAX:
            out, anchors_m, anchors_l = self.compute.softmax(in_addr, m, cols, partial)
            writes.append((out_addr, out.tobytes()))
        elif op == Op.ATTENTION and self._pages:
            o, anchors_m, anchors_l = self.compute.attention_paged(
                in_addr, validate.page_extents(desc, self._pages), m, desc.dev_cols, validate.page_half_bytes(desc))
            writes.append((out_addr, o.tobytes()))
        elif op == Op.ATTENTION:
            o, anchors_m, anchors_l = self.compute.attention(in_addr, desc.dev_addr, second, m, k, n, trans)
            writes.append((out_addr, o.tobytes()))
        elif op == Op.LORA_XAB:
            writes.append((out_addr, self.compute.lora_xab(in_addr, desc.dev_addr, second, m, k, n)))
        else:
            writes.append((out_addr, self.compute.gemm(in_addr, desc.dev_addr, m, k, n, trans)))
        if anchors:
            stats = bytearray(m * LINE_BYTES)
            for r in range(m):
                stats[r * LINE_BYTES:r * LINE_BYTES + 8] = (np.float32(anchors_m[r]).tobytes()
                                                            + np.float32(anchors_l[r]).tobytes())
            writes.append((out_addr + stats_offset(desc), bytes(stats)))

    def _page_runs(self, desc, stage, plan):
        """A paged ATTENTION stage's DRAM runs (hw/front_end.py MAIN_RUN, REST_RUN over the
        pages): ([(address, lines)] of the whole packs, a run a page, the last k-group's
        (address, lines), and, tiled, each row's first byte); None unpaged. Stage 0 reads the
        pages' keys, stage 1 their values."""
        if not self._pages:
            return None
        tokens, half, d = validate.page_tokens(desc), validate.page_half_bytes(desc), desc.dev_cols
        main_tokens = plan.full_groups * plan.pack
        main = []
        for p in range(-(-main_tokens // tokens)):
            count = min(tokens, main_tokens - p * tokens)
            main.append((self._pages[p] + stage * half, lines(2 * count * d)))
        first = self._pages[main_tokens // tokens] + stage * half + 2 * (main_tokens % tokens) * d \
            if plan.rest_rows else 0
        rest = (first - first % LINE_BYTES, lines(first % LINE_BYTES + 2 * plan.rest_rows * d))
        # a tiled stage's rows (a token each): each one's first byte
        rows = ([self._pages[k // tokens] + stage * half + 2 * (k % tokens) * d for k in range(main_tokens)]
                if plan.tiled else None)
        return main, rest, rows

    def _stage(self, t, addr, plan, split, busy, page_runs=None):
        """WEIGHTS_START (at t, or, when the stage changes the compute unit's mode, once PLAN
        has seen its pipeline empty: sim/stage_planner.py) .. the last chunk: the groups of
        whole packs (paired chunks with the split), then the last group (sim/chunk_dispatch.py).
        The fetcher spends a cycle on each of the two runs that is empty. `page_runs`: a
        paged stage's runs (`_page_runs`). Returns (the cycle after the last chunk, the
        cycles from it until the chunk's sums are written, less one)."""
        state, lanes = self._state, self.cfg.lanes
        main_runs, rest_run = page_runs[:2] if page_runs else (None, None)
        if plan.mode != state.pipe_mode:
            t = max(t, state.pipe_empty + 1)
        # PLAN waits for the lanes' packed rows (hw/compute_unit.py lanes_ready), and
        # WEIGHTS_START is the cycle after PLAN
        t = max(t, state.lanes_since + LANES_READY_AFTER + 1)
        if plan.tiled:
            for index, (w0, cols) in enumerate(plan.tiles(lanes)):
                if index:
                    self._fetch_from += 1           # the fetcher's cycle between two tiles
                t = self._tile(t, addr, plan, w0, cols, busy, page_runs[2] if page_runs else None,
                               point=index == 0)
        elif plan.full_groups:
            t = self._phase(t, addr, 0, plan.full_groups, plan.pack * plan.cols_dim, busy, pair=split,
                            runs=main_runs)
        else:
            self._fetch_from = self._point(self._fetch_from, busy, needs_reader=False) + 1
        if plan.rest_rows:
            t = self._phase(t, addr, plan.main_elems, 1, plan.rest_rows * plan.cols_dim, busy,
                            runs=[rest_run] if rest_run else None, point=False)
        else:
            self._fetch_from += 1
        state.pipe_mode = plan.mode
        state.pipe_empty = t + chunk_dispatch.busy_cycles(plan, lanes)
        return t, chunk_dispatch.drain_cycles(plan, lanes)

    def _tile(self, start, addr, plan, w0, cols, busy, paged, point):
        # `paged`: None, or each row's first byte (its page's, _page_runs)
        """A tiled stage's column tile from word w0, `cols` elements a row (hw/chunk_dispatch.py):
        its WEIGHTS_START at `start`, then a strided job of the unpacker over a run per row
        (hw/front_end.py: the operand's rows N elements apart, or a paged stage's rows in
        their pages). Returns the cycle after its last slot."""
        cfg, lanes = self.cfg, self.cfg.lanes
        n = plan.cols_dim
        if paged is not None:
            # (the stage's rows in their pages: page_runs holds each row's first byte)
            firsts = [row + 2 * w0 * lanes for row in paged]
        else:
            firsts = [addr + 2 * (k * n + w0 * lanes) for k in range(plan.full_groups)]
        runs = [(first - first % LINE_BYTES, lines(first % LINE_BYTES + 2 * cols)) for first in firsts]
        # (a row's offset into its first beat: the tile's first row's, then N more a row)
        offset = (firsts[0] % cfg.beat_bytes) // 2
        unpack = unpacker.Consumer(*unpacker.slots(offset, plan.full_groups, cols, lanes, stride=n % lanes),
                                   lanes, start + 1)
        self._gather(runs, busy, unpack, start + 1, point)
        return int(unpack.times[-1]) + 1

    def _lanes_follow(self, n, cycle):
        """The compute unit's n_cols is `n` from `cycle` on (a change restarts lanes_ready)."""
        state = self._state
        if n != state.lanes_n:
            state.lanes_n, state.lanes_since = n, cycle

    def _readout(self, start, word_bytes, steps, run):
        """READOUT (BANK_OUT for steps None) from its first cycle `start`: the words of
        `word_bytes` bytes each through the fold unit, `steps` adds each (steps None:
        SOFTMAX's input buffer, a word the second cycle after the previous one was taken),
        into the buffers (run None) or through the line packer into the write run from
        byte `run` that the writer starts at start - 1 (hw/readout.py). Returns the cycle its
        last word is taken (`done`); the readout is free from the next."""
        cfg = self.cfg
        if run is not None:
            run_lines = -(-(run % LINE_BYTES + int(np.sum(word_bytes))) // LINE_BYTES)
            writer = self._state.writer
            writer.stream(start - 1, run - run % LINE_BYTES, run_lines)
            packer = line_packer.Run(run % cfg.beat_bytes, word_bytes, cfg.beat_bytes,
                                     lambda index, shown: writer.take(shown))
            take_word = packer.take_word
        else:
            def take_word(i, ready):
                return ready
        popped = readout.run(start, len(word_bytes), steps, take_word)
        self._state.readout_free = popped[-1] + 1
        return popped[-1]

    def _word_bytes(self, rows, n, esize):
        """Bytes of each word of LANES values, rows of N in order (shared, read-only)."""
        key = (rows, n, esize)
        words = self._words.get(key)
        if words is None:
            if len(self._words) >= CACHE_ENTRIES:
                self._words.clear()
            lanes = self.cfg.lanes
            counts = np.minimum(n - np.arange(0, n, lanes, dtype=np.int64), lanes) * esize
            words = self._words[key] = np.tile(counts, rows)
            words.flags.writeable = False
        return words

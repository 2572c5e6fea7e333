"""Model of hw/control_unit.py: one descriptor's schedule, results and completion.

Cycle by cycle as the RTL's FSM: IDLE pops, DECODE takes one cycle; an error goes
straight to COMPLETE. LOAD/STORE start the reader and writer together and complete the
cycle after both are idle. GEMM runs per group of ROWS input rows: the input phase
(reader + unpacker into the input buffer), the weight phase (reader + unpacker through
the PE array: the k-groups of whole packs, then the last k-group as a run of its own,
isa/pe_array.py), DRAIN until the last sums are written, then per LANES columns of each
row one result piece: the fold unit's steps, then one or two single-line writes.
COMPLETE issues the completion line; the unit is back in IDLE the cycle after that
write has been answered.
"""
import dataclasses

import numpy as np

from isa import Status
from isa.pe_array import plan as pe_plan
from isa.slots import CQ_CYCLES, CQ_SEQ, CQ_STATUS, HEADER_BYTES, LINE_BYTES
from . import dram_reader, dram_writer, unpacker
from .compute_unit import ComputeUnit
from .decoder import decode

DECODE_CYCLES = 2        # pop -> first cycle of the next state (DECODE in between)
PIPE_DEPTH = 6           # a chunk -> its sums visible to the fold unit (hw/compute_unit.py)
FOLD_STEP_CYCLES = 4     # one fold add: operands registered, then the adder's three stages


@dataclasses.dataclass
class Schedule:
    complete: int                       # cycle of COMPLETE: the completion's `cycles` end here
    status: Status
    writes: list                        # (addr, bytes) the descriptor writes, results first
    read_busy: list                     # (handshake, last beat) of each of the reader's bursts
    free: int                           # first cycle the control unit is back in IDLE


class ControlUnit:
    def __init__(self, cfg, memory):
        self.cfg = cfg
        self.memory = memory
        self.reads = []                 # (address, bytes) of every run the reader made
        self.compute = ComputeUnit(memory, cfg.lanes)

    def execute(self, entry, regs, pop, steals=()):
        """The schedule of `entry` popped at cycle `pop` on a queue with registers `regs`;
        `steals` are the command engine's reads that the reader's bursts wait for."""
        self._steals = steals
        cfg, desc = self.cfg, entry.desc
        status, kind = decode(desc, regs, cfg)
        start = pop + DECODE_CYCLES
        sq_slot, cq_slot = regs.slot_addr(regs.sq_base, entry.seq), regs.slot_addr(regs.cq_base, entry.seq)
        busy = []
        writes = []
        if status != Status.OK:
            complete = start
        elif kind in ("load", "store"):
            lines = desc.dev_size
            src, dst = ((desc.dev_addr, cq_slot + HEADER_BYTES) if kind == "load"
                        else (sq_slot + HEADER_BYTES, desc.dev_addr))
            run = self._read(start, src, lines, busy, lambda shown: dram_writer.run_write(start, dst, shown, cfg)[0])
            complete = dram_writer.run_write_done(start, dst, run[2] + dram_reader.BUFFER_LATENCY, cfg) + 1
            writes.append((dst, self.memory.read(src, lines * LINE_BYTES)))
        else:
            complete, result = self._gemm(start, desc, sq_slot, busy)
            writes.append((cq_slot + HEADER_BYTES, result))
        header = bytearray(HEADER_BYTES)       # the whole first line, zeros but for these
        header[CQ_SEQ:CQ_SEQ + 8] = entry.seq.to_bytes(8, "little")
        header[CQ_STATUS:CQ_STATUS + 4] = int(status).to_bytes(4, "little")
        header[CQ_CYCLES:CQ_CYCLES + 8] = (complete - entry.taken).to_bytes(8, "little")
        writes.append((cq_slot, bytes(header)))
        # COMPLETE starts the completion line's write; COMPLETE_WAIT sees it done, then IDLE
        free = dram_writer.line_write_done(complete, cfg) + 1
        return Schedule(complete, status, writes, busy, free)

    def _read(self, start, addr, beats, busy, consumer):
        """A reader run for `consumer` (see sim/dram_reader.run); records its bursts."""
        self.reads.append((addr, beats * self.cfg.beat_bytes))
        run = dram_reader.run(start, addr, beats, self.cfg, consumer, self._steals)
        handshakes, lengths, arrivals, _ = run
        # each burst is in flight from its address handshake to its last beat
        busy.extend(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
        return run

    def _phase(self, start, addr, offset, rows, cols, busy):
        """A reader + unpacker run; returns the cycle after its last chunk."""
        lanes = self.cfg.lanes
        last_beats = unpacker.chunk_last_beats(offset, rows, cols, lanes)
        times = []

        def unpack(shown):
            times[:] = [unpacker.chunk_times(shown, last_beats)]
            return unpacker.pull_times(shown, times[0], offset, rows, cols, lanes)
        self._read(start, addr, unpacker.run_beats(offset, rows, cols, lanes), busy, unpack)
        return int(times[0][-1]) + 1

    def _gemm(self, start, desc, sq_slot, busy):
        cfg, lanes = self.cfg, self.cfg.lanes
        m, k, n = desc.in_rows, desc.dev_rows, desc.dev_cols
        result = self.compute.gemm(sq_slot + HEADER_BYTES, desc.dev_addr, m, k, n)
        p = pe_plan(n, lanes)
        full_groups, rest_rows = divmod(k, p.pack)
        main_elems = full_groups * p.pack * n
        # fold adds per result piece: the sets that received a k-group, the packed rows
        sets_used = min(p.sets, full_groups + (rest_rows > 0))
        fold_steps = sets_used - 1 + (p.pack.bit_length() - 1)

        # result pieces: LANES columns of one row, spanning two lines when misaligned
        cols = np.arange(0, n, lanes, dtype=np.int64)
        counts = np.minimum(n - cols, lanes)
        t = start
        for m0 in range(0, m, cfg.rows):
            rows = min(cfg.rows, m - m0)
            in_elem = m0 * k
            in_addr = sq_slot + HEADER_BYTES + (in_elem // lanes) * cfg.beat_bytes
            t = self._phase(t, in_addr, in_elem % lanes, rows, k, busy)              # input
            if full_groups:                                                           # whole packs
                t = self._phase(t, desc.dev_addr, 0, full_groups, p.pack * n, busy)
            if rest_rows:                                                             # the last k-group
                t = self._phase(t, desc.dev_addr + (main_elems // lanes) * cfg.beat_bytes,
                                main_elems % lanes, 1, rest_rows * n, busy)
            t += PIPE_DEPTH - 1                                                       # DRAIN
            shifts = ((np.arange(m0, m0 + rows, dtype=np.int64)[:, None] * n + cols[None, :]) % lanes)
            two_lines = int(np.count_nonzero(shifts + counts[None, :] > lanes))
            t = self._results(t, rows * len(cols), two_lines, fold_steps)
        return t, result

    def _results(self, t, pieces, two_lines, fold_steps):
        """RESULT (the fold starts), RESULT_FOLD (its steps), RESULT_LINE0 (write),
        RESULT_WAIT0, RESULT_LINE1 (second write or not), RESULT_NEXT: per piece, from
        RESULT to the next state."""
        line = dram_writer.line_write_done(0, self.cfg)   # start (RESULT_LINE0) -> busy low
        fold = 1 + fold_steps * FOLD_STEP_CYCLES          # RESULT_FOLD, to the cycle it sees the sum
        one_line = line + 4 + fold   # RESULT, RESULT_FOLD.., LINE0, write, LINE1, NEXT
        second_line = line - 1       # LINE1 starts a write; NEXT waits for it
        return t + pieces * one_line + two_lines * second_line

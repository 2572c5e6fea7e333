"""Model of hw/control_unit.py: one descriptor's schedule, results and completion.

Cycle by cycle as the RTL's FSM: IDLE pops, DECODE takes one cycle; an error goes
straight to COMPLETE. LOAD/STORE start the reader and writer together and complete the
cycle after both are idle. GEMM runs per group of ROWS input rows: the input phase
(reader + unpacker into the input buffer), the weight phase (reader + unpacker through
the PE array: the k-groups of whole packs, then the last k-group as a run of its own,
isa/pe_array.py; one input row: slots of paired chunks), DRAIN until the last sums are
written, then per LANES columns of each row one result piece: the fold unit's steps
(`Plan.fold_steps`), then one to three single-line writes, during which the next word
folds.
COMPLETE issues the completion line; the unit is back in IDLE the cycle after that
write has been answered.
"""
import dataclasses

import numpy as np

from isa import Status, Op
from isa.descriptor import Flag
from isa.pe_array import plan as pe_plan
from isa.slots import CQ_CYCLES, CQ_SEQ, CQ_STATUS, HEADER_BYTES, LINE_BYTES
from isa.validate import lines, stats_offset
from . import dram_reader, dram_writer, softmax_unit, unpacker
from .compute_unit import ComputeUnit
from .decoder import decode

DECODE_CYCLES = 2        # pop -> first cycle of the next state (DECODE in between)
STAGE_CYCLES = 2         # STAGE, PLAN: before a stage's WEIGHTS_START
PIPE_DEPTH = 6           # a chunk -> its sums visible to the fold unit (hw/compute_unit.py)
FOLD_CYCLES = 2          # FOLD (the fold starts), FOLD_WAIT's cycle that sees the sum
FOLD_STEP_CYCLES = 4     # one fold add: operands registered, then the adder's three stages
BANK_READ_CYCLES = 2     # BANK_READ, BANK_PIECE: a word of SOFTMAX's rows read back
SFU_START_CYCLES = 1     # SFU_START, before the unit's own cycles (sim/softmax_unit.py)


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
            complete = self._compute(start, desc, sq_slot, cq_slot + HEADER_BYTES, busy, writes)
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

    def _phase(self, start, addr, offset, rows, cols, busy, pair=False):
        """A reader + unpacker run; returns the cycle after its last slot."""
        lanes = self.cfg.lanes
        ends = unpacker.slot_ends(offset, rows, cols, lanes, pair)
        last_beats = unpacker.last_beats(ends, lanes)
        times = []

        def unpack(shown):
            times[:] = [unpacker.slot_times(shown, last_beats)]
            return unpacker.pull_times(shown, times[0], ends, lanes)
        self._read(start, addr, unpacker.run_beats(offset, rows, cols, lanes), busy, unpack)
        return int(times[0][-1]) + 1

    def _compute(self, start, desc, sq_slot, out_addr, busy, writes):
        """A read-compute descriptor from GROUP on: per group of ROWS input rows, the input,
        the op's stages, its softmax rows and result pieces (as hw/control_unit.py's FSM).
        Appends the result writes; returns the COMPLETE cycle."""
        cfg, lanes, op = self.cfg, self.cfg.lanes, desc.op
        m, k, n = desc.in_rows, desc.dev_rows, desc.dev_cols
        in_addr, cols = sq_slot + HEADER_BYTES, desc.in_cols
        partial = bool(desc.flags & Flag.PARTIAL)
        second = desc.dev_addr + lines(k * n * 2) * LINE_BYTES
        if op == Op.SOFTMAX:
            out, anchors_m, anchors_l = self.compute.softmax(in_addr, m, cols, partial)
            stages, sfu_length, esize, out_n = [], cols, 2, cols
            writes.append((out_addr, out.tobytes()))
            anchors = partial
        elif op == Op.ATTENTION:
            o, anchors_m, anchors_l = self.compute.attention(in_addr, desc.dev_addr, second, m, k, n)
            stages, sfu_length, esize, out_n = [(desc.dev_addr, k, n, False), (second, n, k, True)], n, 4, k
            writes.append((out_addr, o.tobytes()))
            anchors = True
        elif op == Op.LORA_XAB:
            writes.append((out_addr, self.compute.lora_xab(in_addr, desc.dev_addr, second, m, k, n)))
            stages, sfu_length, esize, out_n = [(desc.dev_addr, k, n, False), (second, n, k, True)], 0, 2, k
            anchors = False
        else:
            writes.append((out_addr, self.compute.gemm(in_addr, desc.dev_addr, m, k, n)))
            stages, sfu_length, esize, out_n = [(desc.dev_addr, k, n, True)], 0, 2, n
            anchors = False
        if anchors:
            stats = bytearray(m * LINE_BYTES)
            for r in range(m):
                stats[r * LINE_BYTES:r * LINE_BYTES + 8] = (np.float32(anchors_m[r]).tobytes()
                                                            + np.float32(anchors_l[r]).tobytes())
            writes.append((out_addr + stats_offset(desc), bytes(stats)))

        line = dram_writer.line_write_done(0, cfg) + 1     # a line write, from its start to the next state
        t = start
        for m0 in range(0, m, cfg.rows):
            rows = min(cfg.rows, m - m0)
            in_elem = m0 * cols
            t = self._phase(t, in_addr + (in_elem // lanes) * cfg.beat_bytes, in_elem % lanes, rows, cols, busy)
            for addr, sk, sn, to_result in stages:
                p = pe_plan(sn, lanes, m)
                t = self._stage(t + STAGE_CYCLES, addr, sk, sn, p, busy)
                steps = p.fold_steps(sk)
                words = -(-sn // lanes)
                if to_result:
                    t += self._readout(steps, line * self._piece_lines(m0, rows, out_n, esize))
                else:
                    t += rows * words * (FOLD_CYCLES + steps * FOLD_STEP_CYCLES + 1)
                    if op == Op.ATTENTION:
                        t += rows * (SFU_START_CYCLES + softmax_unit.cycles(sfu_length, True, cfg))
            if op == Op.SOFTMAX:
                t += rows * (SFU_START_CYCLES + softmax_unit.cycles(sfu_length, partial, cfg))
                words = -(-cols // lanes)
                t += rows * words * BANK_READ_CYCLES + line * int(self._piece_lines(m0, rows, out_n, 2).sum())
            if anchors:
                t += rows * line
            t += 1                                                        # GROUP_END
        return t

    def _stage(self, t, addr, k, n, p, busy):
        """WEIGHTS_START (at t) .. DRAIN: the k-groups of whole packs (paired chunks with the
        split), then the last k-group; returns the first cycle of FOLD."""
        lanes = self.cfg.lanes
        full_groups, rest_rows = divmod(k, p.pack)
        main_elems = full_groups * p.pack * n
        if full_groups:
            t = self._phase(t, addr, 0, full_groups, p.pack * n, busy, pair=p.split > 1)
        if rest_rows:
            t = self._phase(t, addr + (main_elems // lanes) * self.cfg.beat_bytes,
                            main_elems % lanes, 1, rest_rows * n, busy)
        return t + PIPE_DEPTH - 1

    @staticmethod
    def _readout(steps, write_cycles):
        """From FOLD to the state after the last piece of a stage whose words go out as
        result pieces, `write_cycles` being each piece's line writes: the fold unit adds a
        word's sums while the previous word's piece is written (it starts in that piece's
        first PIECE_LINE), so words follow each other by the longer of the two."""
        fold = FOLD_CYCLES + steps * FOLD_STEP_CYCLES            # fold start -> FOLD_WAIT sees the sum
        write = 1 + write_cycles                                 # FOLD_WAIT -> the piece's lines -> next state
        return fold - 1 + int(np.maximum(write[:-1], fold).sum()) + int(write[-1])

    def _piece_lines(self, m0, rows, n, esize):
        """Lines each result piece of rows m0 .. m0 + rows - 1 touches, in order: each word
        of LANES values, at its byte offset, is written line by line."""
        lanes, line = self.cfg.lanes, self.cfg.beat_bytes
        cols = np.arange(0, n, lanes, dtype=np.int64)
        counts = np.minimum(n - cols, lanes)
        start = (np.arange(m0, m0 + rows, dtype=np.int64)[:, None] * n + cols[None, :]) * esize
        end = start + counts[None, :] * esize
        return ((end - 1) // line - start // line + 1).reshape(-1)

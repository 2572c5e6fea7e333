"""Model of hw/control_unit.py: one descriptor's schedule, results and completion.

Cycle by cycle as the RTL's FSM: IDLE pops, DECODE takes one cycle; an error goes
straight to COMPLETE. LOAD/STORE start the reader and writer together and complete the
cycle after both are idle. GEMM runs per group of ROWS input rows: the input phase
(reader + unpacker into the input buffer), the weight phase (reader + unpacker through
the PE array: the k-groups of whole packs, then the last k-group as a run of its own,
isa/pe_array.py; one input row: slots of paired chunks), DRAIN until the last sums are
written, then READOUT: the words through the fold unit (sim/fold_unit.py), into the
buffers or through the line packer (sim/line_packer.py) into one write run per group
(sim/dram_writer.py), each stage waiting on the next as the RTL's handshakes do.
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
from . import dram_reader, dram_writer, fold_unit, line_packer, softmax_unit, unpacker
from .compute_unit import ComputeUnit
from .decoder import decode

DECODE_CYCLES = 2        # pop -> first cycle of the next state (DECODE in between)
STAGE_CYCLES = 2         # STAGE, PLAN: before a stage's WEIGHTS_START
PIPE_DEPTH = 6           # a chunk -> its sums visible to the fold unit (hw/compute_unit.py)
BANK_START_CYCLES = 1    # BANK_START: SOFTMAX's write run starts, then BANK_OUT
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
        dram_reader.load_kernels(cfg)

    def execute(self, entry, regs, pop, steals=()):
        """The schedule of `entry` popped at cycle `pop` on a queue with registers `regs`;
        `steals` are the command engine's reads that the reader's bursts wait for."""
        self._steals = steals
        cfg, desc = self.cfg, entry.desc
        status, kind = decode(desc, regs, cfg)
        start = pop + DECODE_CYCLES
        # the reader through the descriptor's runs, and the first cycle the fetcher (or
        # COPY_START) may start the next one
        self._reader, self._fetch_from = dram_reader.Reader(cfg), start
        sq_slot, cq_slot = regs.slot_addr(regs.sq_base, entry.seq), regs.slot_addr(regs.cq_base, entry.seq)
        busy = []
        writes = []
        if status != Status.OK:
            complete = start
        elif kind in ("load", "store"):
            lines = desc.dev_size
            src, dst = ((desc.dev_addr, cq_slot + HEADER_BYTES) if kind == "load"
                        else (sq_slot + HEADER_BYTES, desc.dev_addr))
            run = self._read(src, lines, busy, lambda shown: dram_writer.run_write(start, dst, shown, cfg)[0])
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

    def _read(self, addr, beats, busy, consumer, floor=0):
        """The descriptor's next reader run, for `consumer` (see sim/dram_reader.run),
        started as the fetcher does: once the reader has issued the previous run's last
        burst, and a cycle after the previous start (or skipped run) at the earliest.
        Records its bursts."""
        self.reads.append((addr, beats * self.cfg.beat_bytes))
        start = self._fetch_from
        if self._reader.issued_all is not None:
            start = max(start, self._reader.issued_all)
        self._fetch_from = start + 1
        run = dram_reader.run(start, addr, beats, self.cfg, consumer, self._steals, self._reader, floor)
        handshakes, lengths, arrivals, _ = run
        # each burst is in flight from its address handshake to its last beat
        busy.extend(zip(handshakes.tolist(), arrivals[np.cumsum(lengths) - 1].tolist()))
        return run

    def _phase(self, start, addr, offset, rows, cols, busy, pair=False):
        """A reader run (fetched ahead) through the unpacker started at `start`; returns the
        cycle after its last slot."""
        lanes = self.cfg.lanes
        ends = unpacker.slot_ends(offset, rows, cols, lanes, pair)
        last_beats = unpacker.last_beats(ends, lanes)
        times = []

        def unpack(shown):
            # beats fetched ahead wait in the buffer until the unpacker is active
            available = np.maximum(shown, start + 1)
            times[:] = [unpacker.slot_times(available, last_beats)]
            return unpacker.pull_times(available, times[0], ends, lanes)
        self._read(addr, unpacker.run_beats(offset, rows, cols, lanes), busy, unpack, start + 1)
        return int(times[0][-1]) + 1

    def _compute(self, start, desc, sq_slot, out_addr, busy, writes):
        """A read-compute descriptor from GROUP on: per group of ROWS input rows, the input,
        the op's stages, its softmax rows and result runs (as hw/control_unit.py's FSM).
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
            # the group's results: bytes m0 * out_n * esize on, from the line holding the first
            first = m0 * out_n * esize
            run = (out_addr + first // cfg.beat_bytes * cfg.beat_bytes, first % cfg.beat_bytes)
            for addr, sk, sn, to_result in stages:
                p = pe_plan(sn, lanes, m)
                t = self._stage(t + STAGE_CYCLES, addr, sk, sn, p, busy)
                t = self._readout(t, self._word_bytes(rows, sn, esize), p.fold_steps(sk),
                                  run if to_result else None)
                if op == Op.ATTENTION and not to_result:
                    t += rows * (SFU_START_CYCLES + softmax_unit.cycles(sfu_length, True, cfg))
            if op == Op.SOFTMAX:
                t += rows * (SFU_START_CYCLES + softmax_unit.cycles(sfu_length, partial, cfg))
                t = self._readout(t + BANK_START_CYCLES, self._word_bytes(rows, cols, 2), None, run)
            if anchors:
                t += rows * line
            t += 1                                                        # GROUP_END
        return t

    def _stage(self, t, addr, k, n, p, busy):
        """WEIGHTS_START (at t) .. DRAIN: the k-groups of whole packs (paired chunks with the
        split), then the last k-group; returns the first cycle of READOUT. The fetcher
        spends a cycle on each of the two runs that is empty."""
        lanes = self.cfg.lanes
        full_groups, rest_rows = divmod(k, p.pack)
        main_elems = full_groups * p.pack * n
        if full_groups:
            t = self._phase(t, addr, 0, full_groups, p.pack * n, busy, pair=p.split > 1)
        else:
            self._fetch_from += 1
        if rest_rows:
            t = self._phase(t, addr + (main_elems // lanes) * self.cfg.beat_bytes,
                            main_elems % lanes, 1, rest_rows * n, busy)
        else:
            self._fetch_from += 1
        return t + PIPE_DEPTH - 1

    def _readout(self, start, word_bytes, steps, run):
        """READOUT (BANK_OUT for steps None) from its first cycle `start`: the words of
        `word_bytes` bytes each through the fold unit, `steps` adds each (steps None:
        SOFTMAX's input buffer, a word the second cycle after the previous one was taken),
        into the buffers (run None) or through the line packer into the write run (addr,
        offset) that the writer started at start - 1. Returns the next state's first cycle."""
        cfg = self.cfg
        taken, popped = [], []
        if run is not None:
            addr, offset = run
            run_lines = -(-(offset + int(np.sum(word_bytes))) // cfg.beat_bytes)
            writer = dram_writer.StreamRun(start - 1, addr, run_lines, cfg)
            packer = line_packer.Run(offset, word_bytes, cfg.beat_bytes, writer.take)
        delay = fold_unit.out_delay(steps or 0)
        for i in range(len(word_bytes)):
            if steps is None:
                ready = start + 1 if i == 0 else popped[-1] + 2
            else:
                taken.append(fold_unit.next_take(start, taken, popped, steps))
                ready = taken[-1] + delay
            if i:
                ready = max(ready, popped[-1] + 1)
            popped.append(packer.take_word(i, ready) if run is not None else ready)
        return popped[-1] + 1 if run is None else writer.done() + 1

    def _word_bytes(self, rows, n, esize):
        """Bytes of each word of LANES values, rows of N in order."""
        lanes = self.cfg.lanes
        counts = np.minimum(n - np.arange(0, n, lanes, dtype=np.int64), lanes) * esize
        return np.tile(counts, rows)

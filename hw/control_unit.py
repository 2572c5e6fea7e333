"""The control unit: executes one decoded descriptor at a time.

It owns the datapath: the decoder, the DRAM reader (with the DRAM buffer), the
unpacker, the compute unit and the DRAM writer, and sequences them:

- LOAD / STORE: the reader streams the source lines through the DRAM buffer into
  the writer.
- GEMV / GEMM, per group of up to ROWS input rows: the group's rows are read from the
  submission slot into the input buffer; the weight matrix streams from DRAM through
  the PE array as k-groups (`isa/pe_array.py`: packed rows when N <= LANES / 2, the last
  k-group, when K is not a multiple of the packing, as a run of its own); after the
  pipeline drains, the fold unit sums each word's partial sums, and the group's results
  are rounded to FP16 and written into the completion slot, each LANES-column piece as
  one or two lines with byte strobes.
- then, after every result write has been answered, status, cycles and completion
  word go out in one line-sized write, and the queue's HEAD, STATUS and irq follow.
"""
from amaranth import Module, Signal, Mux, Cat, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa import Status
from isa.pe_array import ACC_INTERLEAVE
from isa.slots import CQ_SEQ, CQ_STATUS, CQ_CYCLES, HEADER_BYTES
from .axi import device_bus, AXI4Signature
from .command_engine import ibuf_entry
from .compute_unit import ComputeUnit, PIPE_DEPTH
from .decoder import Decoder
from .dram_reader import DramReader
from .dram_writer import DramWriter
from .queue_geometry import slot_addr
from .regfile import QueueRegs
from .unpacker import Unpacker, DIM_BITS


class ControlUnit(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        self._cfg, self._shared = cfg, shared_cells
        nq = cfg.num_queues
        super().__init__({
            "bus": Out(device_bus(cfg)),
            "queues": In(QueueRegs).array(nq),
            "cycle": In(64),
            "pop_valid": In(1), "pop_ready": Out(1), "pop": In(ibuf_entry(cfg)),
            # completion report to the register file, and the interrupt pulse
            "done_valid": Out(1), "done_queue": Out(range(nq)), "done_seq": Out(32), "done_status": Out(8),
            "irq": Out(nq),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes, lane_bits = cfg.lanes, (cfg.lanes - 1).bit_length()
        line_bits = (cfg.beat_bytes - 1).bit_length()
        m.submodules.decoder = dec = Decoder(cfg)
        m.submodules.reader = reader = DramReader(cfg)
        m.submodules.writer = writer = DramWriter(cfg)
        m.submodules.unpacker = unpack = Unpacker(cfg)
        m.submodules.compute = cu = ComputeUnit(cfg, self._shared)

        # the reader owns the read channels of the bus, the writer the write channels
        read_names = AXI4Signature.AR + ("arvalid", "rready")
        write_names = AXI4Signature.AW + AXI4Signature.W + ("awvalid", "wvalid", "bready")
        m.d.comb += [getattr(self.bus, s).eq(getattr(reader.bus, s)) for s in read_names]
        m.d.comb += [getattr(self.bus, s).eq(getattr(writer.bus, s)) for s in write_names]
        for s in AXI4Signature.R + ("arready", "rvalid"):
            m.d.comb += getattr(reader.bus, s).eq(getattr(self.bus, s))
        for s in AXI4Signature.B + ("awready", "wready", "bvalid"):
            m.d.comb += getattr(writer.bus, s).eq(getattr(self.bus, s))
        # the DRAM buffer feeds the unpacker, or the writer for copies
        copying = Signal()
        m.d.comb += [unpack.src.data.eq(reader.out.data), writer.src.data.eq(reader.out.data),
                     unpack.src.valid.eq(reader.out.valid & ~copying),
                     writer.src.valid.eq(reader.out.valid & copying),
                     reader.out.ready.eq(Mux(copying, writer.src.ready, unpack.src.ready))]

        entry = Signal(ibuf_entry(cfg))
        regs = Signal(QueueRegs)
        with m.Switch(entry.queue):
            for q, queue_regs in enumerate(self.queues):
                with m.Case(q):
                    m.d.comb += regs.eq(queue_regs)
        d = entry.desc
        m.d.comb += [dec.desc.eq(d), dec.log2_slot.eq(regs.log2_slot),
                     dec.data_base.eq(regs.data_base), dec.data_limit.eq(regs.data_limit)]

        status = Signal(8)
        sq_slot, cq_slot = Signal(64), Signal(64)
        m_rows, k_cols, n_cols = d.in_rows, d.dev_rows, d.dev_cols
        m.d.comb += cu.n_cols.eq(n_cols)

        # the descriptor's plan (isa/pe_array.py), fixed at DECODE: packing, words, sets,
        # the k-groups of whole packs, the rows left for a last group, the elements before it
        pack_log2, n_words, sets = Signal(range(lane_bits + 1)), Signal(DIM_BITS), Signal(range(ACC_INTERLEAVE + 1))
        full_groups, rest_rows, sets_used = Signal(DIM_BITS), Signal(range(lanes)), Signal(range(ACC_INTERLEAVE + 1))
        main_elems = Signal(44)
        plan_pack_log2, plan_n_words, plan_sets = Signal.like(pack_log2), Signal.like(n_words), Signal.like(sets)
        for p in range(lane_bits + 1):
            with m.If((n_cols << p) <= lanes):
                m.d.comb += plan_pack_log2.eq(p)
        m.d.comb += [plan_n_words.eq((n_cols + lanes - 1) >> lane_bits), plan_sets.eq(ACC_INTERLEAVE)]
        for s_ in reversed(range(1, ACC_INTERLEAVE)):
            with m.If(plan_n_words * s_ >= ACC_INTERLEAVE):
                m.d.comb += plan_sets.eq(s_)
        plan_groups = Signal(DIM_BITS)
        m.d.comb += plan_groups.eq((k_cols + (1 << plan_pack_log2) - 1) >> plan_pack_log2)

        # GEMM progress: first row of the group, rows in it, flat offset of its input
        m0, group_rows, in_elem = Signal(DIM_BITS), Signal(range(cfg.rows + 1)), Signal(44)
        row, word, out_elem = Signal(range(cfg.rows)), Signal(DIM_BITS), Signal(44)
        # weight stream progress: columns of the run's k-groups, first element of the
        # k-group, k-groups seen (up to the sets), the set's first accumulator word
        run_cols, k_base = Signal(DIM_BITS), Signal(DIM_BITS)
        groups_seen, set_index, set_base = Signal(range(ACC_INTERLEAVE + 1)), Signal(range(ACC_INTERLEAVE)), Signal(DIM_BITS)
        drain = Signal(range(PIPE_DEPTH))
        # a result piece: two lines' worth of data and strobes, whether it spans both, and where
        piece, piece_strb, two_lines, piece_addr = (Signal(2 * cfg.data_bits), Signal(2 * cfg.beat_bytes),
                                                    Signal(), Signal(64))

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.pop_ready.eq(1)
                with m.If(self.pop_valid):
                    m.d.sync += entry.eq(self.pop)
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += [status.eq(dec.status), sq_slot.eq(slot_addr(regs.sq_base, entry.seq, regs)),
                             cq_slot.eq(slot_addr(regs.cq_base, entry.seq, regs)),
                             pack_log2.eq(plan_pack_log2), n_words.eq(plan_n_words), sets.eq(plan_sets),
                             full_groups.eq(k_cols >> plan_pack_log2),
                             rest_rows.eq(k_cols & ((1 << plan_pack_log2) - 1)),
                             sets_used.eq(Mux(plan_groups < plan_sets, plan_groups, plan_sets)),
                             main_elems.eq((k_cols >> plan_pack_log2 << plan_pack_log2) * n_cols)]
                with m.If(dec.status != Status.OK):
                    m.next = "COMPLETE"
                with m.Elif(dec.is_compute):
                    m.d.sync += [m0.eq(0), in_elem.eq(0), out_elem.eq(0)]
                    m.next = "GROUP"
                with m.Else():
                    m.next = "COPY_START"
            with m.State("COPY_START"):
                # load: device operand -> completion slot; store: submission slot -> device operand
                m.d.comb += [copying.eq(1), reader.start.eq(1), writer.start.eq(1), writer.from_stream.eq(1),
                             reader.beats.eq(d.dev_size), writer.beats.eq(d.dev_size)]
                with m.If(dec.is_load):
                    m.d.comb += [reader.addr.eq(d.dev_addr), writer.addr.eq(cq_slot + HEADER_BYTES)]
                with m.Else():
                    m.d.comb += [reader.addr.eq(sq_slot + HEADER_BYTES), writer.addr.eq(d.dev_addr)]
                m.next = "COPY"
            with m.State("COPY"):
                m.d.comb += copying.eq(1)
                with m.If(~reader.busy & ~writer.busy):
                    m.next = "COMPLETE"

            with m.State("GROUP"):
                rows_now, run_beats = Signal(range(cfg.rows + 1)), Signal(32)
                m.d.comb += rows_now.eq(Mux(m_rows - m0 < cfg.rows, m_rows - m0, cfg.rows))
                offset = in_elem[:lane_bits]
                m.d.comb += run_beats.eq((offset + rows_now * k_cols + lanes - 1) >> lane_bits)
                m.d.sync += group_rows.eq(rows_now)
                m.d.comb += [reader.start.eq(1),
                             reader.addr.eq(sq_slot + HEADER_BYTES + (in_elem[lane_bits:] << line_bits)),
                             reader.beats.eq(run_beats),
                             unpack.start.eq(1), unpack.offset.eq(offset), unpack.rows.eq(rows_now),
                             unpack.cols.eq(k_cols),
                             unpack.beats.eq(run_beats)]
                m.next = "INPUT"
            with m.State("INPUT"):
                m.d.comb += [cu.in_we.eq(unpack.valid), cu.in_row.eq(unpack.row),
                             cu.in_word.eq(unpack.col[lane_bits:]), cu.in_data.eq(unpack.data)]
                with m.If(unpack.valid & unpack.last):
                    m.d.sync += [k_base.eq(0), groups_seen.eq(0), set_index.eq(0), set_base.eq(0)]
                    with m.If(full_groups != 0):
                        m.next = "WEIGHTS_START"
                    with m.Else():
                        m.next = "REST_START"
            with m.State("WEIGHTS_START"):
                # the k-groups of whole packs: (K // pack) rows of pack * N elements
                cols = (n_cols << pack_log2)[:DIM_BITS]
                m.d.sync += run_cols.eq(cols)
                m.d.comb += [reader.start.eq(1), reader.addr.eq(d.dev_addr),
                             reader.beats.eq((main_elems + lanes - 1) >> lane_bits),
                             unpack.start.eq(1), unpack.offset.eq(0), unpack.rows.eq(full_groups),
                             unpack.cols.eq(cols), unpack.beats.eq((main_elems + lanes - 1) >> lane_bits)]
                m.next = "WEIGHTS"
            with m.State("REST_START"):
                # the last k-group, K % pack rows, from where the whole packs end
                cols = (rest_rows * n_cols)[:DIM_BITS]
                offset = main_elems[:lane_bits]
                m.d.sync += run_cols.eq(cols)
                m.d.comb += [reader.start.eq(1), reader.addr.eq(d.dev_addr + (main_elems[lane_bits:] << line_bits)),
                             reader.beats.eq((offset + cols + lanes - 1) >> lane_bits),
                             unpack.start.eq(1), unpack.offset.eq(offset), unpack.rows.eq(1),
                             unpack.cols.eq(cols), unpack.beats.eq((offset + cols + lanes - 1) >> lane_bits)]
                m.next = "REST"
            def k_group_chunks():
                m.d.comb += [cu.mac.eq(unpack.valid), cu.first.eq(groups_seen < sets), cu.k_base.eq(k_base),
                             cu.acc_addr.eq(set_base + unpack.col[lane_bits:]), cu.active.eq(unpack.count),
                             cu.w_data.eq(unpack.data)]
                with m.If(unpack.valid & (unpack.col + unpack.count == run_cols)):
                    # a k-group ends: the next one goes to the next set
                    m.d.sync += k_base.eq(k_base + (1 << pack_log2))
                    with m.If(groups_seen < sets):
                        m.d.sync += groups_seen.eq(groups_seen + 1)
                    with m.If(set_index + 1 == sets):
                        m.d.sync += [set_index.eq(0), set_base.eq(0)]
                    with m.Else():
                        m.d.sync += [set_index.eq(set_index + 1), set_base.eq(set_base + n_words)]
                m.d.sync += drain.eq(PIPE_DEPTH - 1)
                return unpack.valid & unpack.last

            with m.State("WEIGHTS"):
                with m.If(k_group_chunks()):
                    with m.If(rest_rows.any()):
                        m.next = "REST_START"
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("REST"):
                with m.If(k_group_chunks()):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                # the last chunk's sums are written PIPE_DEPTH cycles after it
                m.d.sync += drain.eq(drain - 1)
                with m.If(drain == 1):
                    m.d.sync += [row.eq(0), word.eq(0)]
                    m.next = "RESULT"

            with m.State("RESULT"):
                m.d.comb += [cu.fold_start.eq(1), cu.fold_row.eq(row), cu.fold_word.eq(word),
                             cu.fold_n_words.eq(n_words), cu.fold_sets.eq(sets_used),
                             cu.fold_pack.eq(1 << pack_log2)]
                m.next = "RESULT_FOLD"
            with m.State("RESULT_FOLD"):
                # one LANES-column piece of one result row, placed at its byte offset
                col = (word << lane_bits)[:DIM_BITS]
                count, elem = Signal(range(lanes + 1)), Signal(44)
                m.d.comb += [count.eq(Mux(n_cols - col < lanes, n_cols - col, lanes)), elem.eq(out_elem + col)]
                shift = elem[:lane_bits]
                m.d.comb += [cu.fold_row.eq(row), cu.fold_n_words.eq(n_words)]
                with m.If(cu.fold_done):
                    m.d.sync += [piece.eq(cu.sum_fp16 << (shift * 16)),
                                 piece_strb.eq(((Const(1, 1) << (count * 2)) - 1) << (shift * 2)),
                                 two_lines.eq(shift + count > lanes),
                                 piece_addr.eq(cq_slot + HEADER_BYTES + (elem[lane_bits:] << line_bits))]
                    m.next = "RESULT_LINE0"
            with m.State("RESULT_LINE0"):
                m.d.comb += [writer.start.eq(1), writer.addr.eq(piece_addr),
                             writer.line.eq(piece[:cfg.data_bits]), writer.strb.eq(piece_strb[:cfg.beat_bytes])]
                m.next = "RESULT_WAIT0"
            with m.State("RESULT_WAIT0"):
                with m.If(~writer.busy):
                    m.next = "RESULT_LINE1"
            with m.State("RESULT_LINE1"):
                with m.If(two_lines):
                    m.d.comb += [writer.start.eq(1), writer.addr.eq(piece_addr + cfg.beat_bytes),
                                 writer.line.eq(piece[cfg.data_bits:]), writer.strb.eq(piece_strb[cfg.beat_bytes:])]
                m.next = "RESULT_NEXT"
            with m.State("RESULT_NEXT"):
                with m.If(~writer.busy):
                    last_word = ((word + 1) << lane_bits) >= n_cols
                    with m.If(~last_word):
                        m.d.sync += word.eq(word + 1)
                        m.next = "RESULT"
                    with m.Elif(row + 1 < group_rows):
                        m.d.sync += [word.eq(0), row.eq(row + 1), out_elem.eq(out_elem + n_cols)]
                        m.next = "RESULT"
                    with m.Else():
                        m.d.sync += [out_elem.eq(out_elem + n_cols), m0.eq(m0 + cfg.rows),
                                     in_elem.eq(in_elem + cfg.rows * k_cols)]
                        with m.If(m0 + cfg.rows < m_rows):
                            m.next = "GROUP"
                        with m.Else():
                            m.next = "COMPLETE"

            with m.State("COMPLETE"):
                cycles = (self.cycle - entry.taken)[:64]
                # completion line: sequence number, status, zero, cycles, zeros
                assert (CQ_SEQ, CQ_STATUS, CQ_CYCLES) == (0, 8, 16)
                header, status_word = Signal(cfg.data_bits), Signal(32)
                m.d.comb += [status_word.eq(status), header.eq(Cat(entry.seq, status_word, Const(0, 32), cycles))]
                m.d.comb += [writer.start.eq(1), writer.addr.eq(cq_slot), writer.line.eq(header),
                             writer.strb.eq((1 << cfg.beat_bytes) - 1)]
                m.next = "COMPLETE_WAIT"
            with m.State("COMPLETE_WAIT"):
                with m.If(~writer.busy):
                    m.d.comb += [self.done_valid.eq(1), self.done_queue.eq(entry.queue),
                                 self.done_seq.eq(entry.seq[:32]), self.done_status.eq(status),
                                 self.irq.eq(regs.irq_en << entry.queue)]
                    m.next = "IDLE"
        return m


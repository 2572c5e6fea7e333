"""The control unit: executes one decoded descriptor at a time.

It owns the datapath: the front end (which decodes each descriptor once and hands it over
with what it found), the DRAM reader (with the DRAM buffer), the unpacker, the compute
unit, the softmax unit and the DRAM writer, and sequences them:

- LOAD / STORE: the reader streams the source lines through the DRAM buffer into
  the writer.
- Read-compute, per group of up to ROWS input rows: the group's rows are read from the
  submission slot into the input buffer, then one or two *stages*, each a weight matrix
  streamed from DRAM through the PE array as k-groups (`isa/pe_array.py`: packed rows when
  N <= LANES / 2; the last k-group, when K is not a multiple of the packing, as a run of
  its own). After a stage's pipeline drains, the fold unit sums each word's partial sums
  and the word goes where the op sends it:
      GEMV / GEMM        stage 0 -> FP16 results
      LORA_XAB (E3)      stage 0 (x A) -> FP16 into the input buffer (the next input);
                         stage 1 (. B) -> FP16 results
      ATTENTION          stage 0 (q K^T) -> FP32 scores into the output buffer; the softmax
                         unit turns each row into FP16 exp(P - m) in the input buffer and
                         keeps m, l; stage 1 (S V) -> FP32 results (O) starts once the last
                         row's exp values are written, while the unit sums that row's l,
                         and the anchor lines (m, l a row) go out beside it
      SOFTMAX            no stage: the softmax unit runs on each input row in place, the
                         rows go out as FP16 results (and, PARTIAL, the anchor lines)
  A paged ATTENTION first waits (PAGES) for the front end's verdict on its page list; with
  OK it runs as ATTENTION with TRANS_W, its stages' beats (read from the pages by the
  front end) unpacked as one operand's at virtual address 0; else it completes with the
  verdict (BAD_PAGE, DRAM_ERROR), nothing else read.
  The readout streams: the fold unit takes a word a cycle, or with adds one every
  steps + 1 cycles at best (hw/fold_unit.py: one read port a memory); results
  go through the line packer (hw/line_packer.py) into one write run per group, the
  group's rows being one run of bytes in the completion slot. The DRAM runs (the group's
  input rows, each stage's weights) are started by a fetcher of their own, each as soon
  as the reader has issued the previous run: the reads run ahead of the unpacker, which
  finds the beats waiting in the DRAM buffer.
- then, after every result write has been answered, status, cycles and completion
  word go out in one line-sized write, and the queue's HEAD, STATUS and irq follow.
DRAM errors: a beat the unpacker takes with an error response (the reader keeps it beside
the beat) marks the descriptor being executed, and an error response to a write before
its completion line marks the descriptor whose line it is (the writer takes no later
job's writes before that line): the completion says DRAM_ERROR instead of OK. An error
response to the completion line itself reaches STATUS (last error DRAM_ERROR, sticky);
HEAD moves on.
Nothing is carried from one descriptor to the next: a chain lives inside one descriptor,
so a failed descriptor leaves nothing a later one could compute on.

This module is the FSM and the wiring; its parts are components of their own, each with
a block test (tests/unit/test_<block>.py) and a model in sim/:
    front_end.py        pops, decodes and starts the DRAM runs (the run fetcher)
    stage_planner.py    a stage's plan, registered at PLAN (and the compute unit's mode)
    chunk_dispatch.py   the weight runs' unpacker jobs, each slot into the PE rows, the
                        pipeline's counters
    readout.py          a stage's words out (begun when its last sums are written) and
                        the results' write run
    completion.py       the completion line, DRAM_ERROR, the report and the interrupt
"""
from amaranth import Module, Signal, Mux, Cat, Array
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa import Status, Op
from isa.descriptor import DIM_BITS
from isa.slots import HEADER_BYTES
from .axi import device_bus, AXI4Signature
from .command_engine import ibuf_entry
from .completion import Completion
from .compute_unit import ComputeUnit
from .dram_reader import DramReader
from .dram_writer import DramWriter
from .fp import fp16_to_fp32
from .front_end import FrontEnd, task_layout
from .line_packer import LinePacker
from .readout import FROM_FOLD, FROM_INPUT, TO_INPUT, TO_RESULT16, TO_RESULT32, TO_SCORES, Readout
from .regfile import QueueRegs
from .softmax_unit import SoftmaxUnit
from .chunk_dispatch import ChunkDispatch, chunk_ports
from .stage_plan import run_span, stage_operand
from .stage_planner import StagePlanner, plan_ports
from .unpacker import Unpacker


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
        line_log2 = (cfg.port_bytes - 1).bit_length()
        m.submodules.front = front = FrontEnd(cfg)
        m.submodules.reader = reader = DramReader(cfg)
        m.submodules.writer = writer = DramWriter(cfg)
        m.submodules.unpacker = unpack = Unpacker(cfg)
        m.submodules.compute = cu = ComputeUnit(cfg, self._shared)
        m.submodules.softmax = sfu = SoftmaxUnit(cfg, self._shared)
        m.submodules.packer = packer = LinePacker(cfg)
        m.submodules.readout = readout = Readout(cfg, cu.acc_depth, cu.k_words)
        m.submodules.planner = planner = StagePlanner(cfg)
        m.submodules.chunks = chunks = ChunkDispatch(cfg, cu.acc_depth)
        m.submodules.completion = completion = Completion(cfg)

        # the reader owns the read channels of the bus, the writer the write channels
        read_names = device_bus(cfg).ar_names + ("arvalid", "rready")
        write_names = device_bus(cfg).aw_names + AXI4Signature.W + ("awvalid", "wvalid", "bready")
        m.d.comb += [getattr(self.bus, s).eq(getattr(reader.bus, s)) for s in read_names]
        m.d.comb += [getattr(self.bus, s).eq(getattr(writer.bus, s)) for s in write_names]
        for s in AXI4Signature.R + ("arready", "rvalid"):
            m.d.comb += getattr(reader.bus, s).eq(getattr(self.bus, s))
        for s in AXI4Signature.B + ("awready", "wready", "bvalid"):
            m.d.comb += getattr(writer.bus, s).eq(getattr(self.bus, s))
        # the DRAM buffer feeds the unpacker; the line packer feeds the writer (results, and
        # copies, which the unpacker and the packer realign from the source's slots to the
        # destination's)
        wiring.connect(m, reader.out, unpack.src)
        wiring.connect(m, packer.out, writer.src)

        # the front end pops, decodes and starts the reads, one descriptor ahead
        for q in range(cfg.num_queues):
            m.d.comb += front.queues[q].eq(self.queues[q])
        m.d.comb += [front.pop_valid.eq(self.pop_valid), self.pop_ready.eq(front.pop_ready), front.pop.eq(self.pop),
                     reader.start.eq(front.run_start), reader.addr.eq(front.run_addr),
                     reader.lines.eq(front.run_lines), reader.side.eq(front.run_side),
                     front.run_issued.eq(reader.issued_all),
                     front.side_valid.eq(reader.side_valid), front.side_data.eq(reader.side_data),
                     front.side_err.eq(reader.side_err)]

        # the descriptor taken from the front end, with what its decoder found
        task = Signal(task_layout(cfg))
        entry, dec = task.entry, task.decoded
        d = entry.desc

        status = Signal(8)
        sq_slot, cq_slot = Signal(64), Signal(64)
        # DRAM errors of the beats the current descriptor took (the completion adds its writes')
        read_error = Signal()
        took_error = reader.out.valid & reader.out.ready & reader.out_err
        with m.If(took_error):
            m.d.sync += read_error.eq(1)
        # the writer takes a job of the control unit's: it is idle, and no completion waits
        # for its line (the line follows every result write and precedes the next ones)
        writer_free = Signal()
        # (nor while a stage's readout, and its results' write run, waits for its last sums)
        m.d.comb += writer_free.eq(writer.idle & ~completion.pending & ~readout.waiting)
        m_rows = d.in_rows
        is_softmax, is_attention, is_xab = (d.op == Op.SOFTMAX), (d.op == Op.ATTENTION), (d.op == Op.LORA_XAB)
        partial = d.flags.partial

        # ---- the current stage: K, N, where its words go; its plan (the planner, registered
        # at PLAN) and its chunks (the dispatch)
        stage = Signal()
        st_addr, _, st_n, st_trans = stage_operand(d, dec.second_addr, stage)
        # a paged ATTENTION's stages stream from virtual address 0: its pages are whole 4 KiB,
        # so the unpacker's offsets are those of one operand there (the front end reads the pages)
        st_addr = Mux(dec.paged, 0, st_addr)
        dest = Signal(range(4))
        m.d.comb += dest.eq(Mux(stage, Mux(is_attention, TO_RESULT32, TO_RESULT16),
                                Mux(is_attention, TO_SCORES, Mux(is_xab, TO_INPUT, TO_RESULT16))))
        # a stage of one input row spreads its k-groups over PE rows 0 and 1 (isa/pe_array.py);
        # a transposed stage does not (its chunks fill the lanes)
        split = Signal()
        m.d.comb += split.eq((m_rows == 1) & ~st_trans)
        m.d.comb += [planner.sizes.eq(dec.stages[stage]),
                     planner.split.eq(split), planner.pipe_busy.eq(chunks.pipe_busy),
                     chunks.addr.eq(st_addr), chunks.split.eq(split)]
        m.d.comb += [getattr(chunks, name).eq(getattr(planner, name)) for name in plan_ports(lanes)]
        # the compute unit's mode (transposed, its tree) is the plan's: it changes at PLAN
        # only when the pipeline holds no chunk of another mode
        # the lanes' packed rows take LANE_ROW_STAGES cycles to follow N (hw/compute_unit.py
        # lanes_ready): after x A's last chunk they follow . B's N (DRAIN, READOUT_WAIT below),
        # so its PLAN does not wait for them
        lanes_stage = Signal()
        _, _, lanes_n, _ = stage_operand(d, dec.second_addr, lanes_stage)
        m.d.comb += lanes_stage.eq(stage)
        m.d.comb += [cu.n_cols.eq(lanes_n), cu.split.eq(split), cu.trans.eq(planner.trans),
                     cu.t_level.eq(planner.t_level), cu.t_scalar.eq(planner.t_scalar),
                     cu.t_fold_adds.eq(planner.t_fold_adds),
                     cu.t_out.eq(chunks.t_out), cu.t_set.eq(chunks.t_set), cu.t_first.eq(chunks.t_first),
                     cu.t_row_end.eq(chunks.t_row_end)]
        for q, suffix in enumerate(("", "1")):
            m.d.comb += [getattr(cu, f"{name}{suffix}").eq(getattr(chunks, f"{name}{q}"))
                         for name in chunk_ports(lanes, cu.acc_depth)]
        m.d.comb += [chunks.valid.eq(unpack.valid), chunks.last.eq(unpack.last), chunks.row.eq(unpack.row),
                     chunks.col.eq(unpack.col), chunks.count.eq(unpack.count), chunks.data.eq(unpack.data),
                     chunks.pair_valid.eq(unpack.pair_valid), chunks.pair_count.eq(unpack.pair_count),
                     chunks.pair_data.eq(unpack.pair_data), chunks.row_end.eq(unpack.row_end),
                     chunks.pair_row_end.eq(unpack.pair_row_end)]
        drain = chunks.drain

        # ---- progress: group (first row, rows, input offset), the row (softmax, anchors), results
        m0, group_rows, in_elem = Signal(DIM_BITS), Signal(range(cfg.rows + 1)), Signal(44)
        # the group's rows and input elements, registered ahead (for 1 GHz): whether it is
        # the last group, and the last group's rows (worked out in DECODE; its elements the
        # front end's, in the task)
        assert cfg.rows & (cfg.rows - 1) == 0, "ROWS a power of two: a full group's elements a shift"
        last_group, tail_rows = Signal(), Signal(range(cfg.rows + 1))
        row = Signal(range(cfg.rows))
        # result rows: values per row and their size, the byte offset of the group's first row
        esize_log2, out_byte, out_n = Signal(2), Signal(48), Signal(DIM_BITS)
        row_bytes = (out_n << esize_log2)[:24]
        # the group's result bytes, registered with its rows (its write run's lines are then
        # an add from registers: they reach the DRAM writer through the readout)
        group_bytes = Signal(24 + cfg.rows.bit_length())
        # the accumulator bank the next stage writes: the other one is being read out
        acc_bank = Signal()
        m.d.comb += cu.bank.eq(acc_bank)
        anchors_m = Array(Signal(32, name=f"anchor_m{r}") for r in range(cfg.rows))
        anchors_l = Array(Signal(32, name=f"anchor_l{r}") for r in range(cfg.rows))

        # the readout: its fold requests and sums, its words to the packer or the buffers
        m.d.comb += [cu.fold_valid.eq(readout.fold_valid), readout.fold_ready.eq(cu.fold_ready),
                     cu.fold_row.eq(readout.fold_row), cu.fold_word.eq(readout.fold_word),
                     cu.fold_n_cols.eq(readout.fold_n_cols), cu.fold_n_words.eq(readout.fold_n_words),
                     cu.fold_sets.eq(readout.fold_sets), cu.fold_sets1.eq(readout.fold_sets1),
                     cu.fold_pack_log2.eq(readout.fold_pack_log2), cu.fold_bank.eq(readout.fold_bank),
                     readout.sum_valid.eq(cu.sum_valid), cu.sum_ready.eq(readout.sum_ready),
                     readout.sum_fp32.eq(cu.sum_fp32), readout.sum_fp16.eq(cu.sum_fp16),
                     readout.rd_in_data.eq(cu.rd_in_data)]
        readout_free = ~readout.busy & ~readout.waiting
        m.d.comb += [packer.w_valid.eq(readout.w_valid), readout.w_ready.eq(packer.w_ready),
                     packer.w_data.eq(readout.w_data), packer.w_bytes.eq(readout.w_bytes),
                     packer.w_last.eq(readout.w_last)]
        # a results job's write run, as the job begins
        with m.If(readout.run_start):
            m.d.comb += [writer.start.eq(1), writer.from_stream.eq(1), writer.addr.eq(readout.run_addr),
                         writer.lines.eq(readout.run_lines), packer.start.eq(1), packer.offset.eq(readout.run_offset)]

        def start_readout(source, job_dest, results, delay=0):
            """Give the readout the stage just ended (or SOFTMAX's rows) and, with `results`,
            the group's write run (the group's results go after it), to begin `delay` cycles
            later; the next stage writes the other accumulator bank."""
            first = Signal(64, name=f"result_first_{source}")   # the byte address of its first byte
            m.d.comb += first.eq(cq_slot + HEADER_BYTES + out_byte)
            m.d.comb += [readout.start.eq(1), readout.delay.eq(delay), readout.source.eq(source),
                         readout.dest.eq(job_dest), readout.rows.eq(group_rows),
                         readout.n.eq(Mux(source == FROM_FOLD, st_n, out_n)), readout.n_words.eq(planner.n_words),
                         readout.sets.eq(planner.sets_used[0]), readout.sets1.eq(planner.sets_used[1]),
                         readout.pack_log2.eq(planner.pack_log2), readout.bank.eq(acc_bank),
                         readout.results.eq(results), readout.first.eq(first),
                         readout.lines.eq((first[:line_log2] + group_bytes + cfg.port_bytes - 1)
                                          >> line_log2)]
            with m.If(results):
                m.d.sync += out_byte.eq(out_byte + group_bytes)
            if source == FROM_FOLD:
                m.d.sync += acc_bank.eq(~acc_bank)

        # the softmax unit reads one row of the input buffer (widened to FP32 by a format
        # converter a lane) or of the output buffer, and writes FP16 words into the input buffer
        widened = [fp16_to_fp32(m, cu.rd_in_data.word_select(j, 16), f"widened_{j}") for j in range(lanes)]
        m.d.comb += sfu.src_data.eq(Mux(is_attention, cu.rd_acc_data, Cat(*widened)))

        # ---- the anchors: the unit's m and l of each row as it finishes, and one line of
        # them per row, posted once the unit is idle and the writer and the readout are free
        # (the writer latches the line as it takes it). Attention's go out while S V runs,
        # its DRAIN waiting for the last; SOFTMAX's from its ANCHORS state
        sfu_row = Signal(range(cfg.rows))
        with m.If(sfu.done):
            m.d.sync += [anchors_m[sfu_row].eq(sfu.m), anchors_l[sfu_row].eq(sfu.l)]
        anchors_due, anchor_row = Signal(), Signal(range(cfg.rows))
        anchor_post, anchor_last = Signal(), Signal()
        m.d.comb += [anchor_post.eq(anchors_due & ~sfu.busy & readout_free & writer_free),
                     anchor_last.eq(anchor_row + 1 >= group_rows)]
        with m.If(anchor_post):
            m.d.comb += [writer.start.eq(1),
                         writer.addr.eq(cq_slot + HEADER_BYTES + dec.stats_offset + ((m0 + anchor_row) << line_log2)),
                         writer.line.eq(Cat(anchors_m[anchor_row], anchors_l[anchor_row])),
                         writer.strb.eq((1 << cfg.port_bytes) - 1)]
            with m.If(anchor_last):
                m.d.sync += [anchor_row.eq(0), anchors_due.eq(0)]
            with m.Else():
                m.d.sync += anchor_row.eq(anchor_row + 1)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += front.task.ready.eq(1)
                with m.If(front.task.valid):
                    m.d.sync += task.eq(front.task.payload)
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += [status.eq(dec.status), read_error.eq(0),
                             sq_slot.eq(task.sq_slot), cq_slot.eq(task.cq_slot),
                             m0.eq(0), in_elem.eq(0), out_byte.eq(0), last_group.eq(d.in_rows <= cfg.rows)]
                tail = d.in_rows[:(cfg.rows - 1).bit_length()] if cfg.rows > 1 else 0
                m.d.sync += tail_rows.eq(Mux(tail == 0, cfg.rows, tail))
                # result rows: FP32 O for attention, else FP16; their values: the last
                # product's N (isa/validate.py result_cols)
                trans = d.flags.trans_w
                with m.If(is_attention):
                    m.d.sync += [esize_log2.eq(2), out_n.eq(Mux(trans, d.dev_cols, d.dev_rows))]
                with m.Elif(is_softmax):
                    m.d.sync += [esize_log2.eq(1), out_n.eq(d.in_cols)]
                with m.Elif(is_xab):
                    m.d.sync += [esize_log2.eq(1), out_n.eq(d.dev_rows)]
                with m.Else():
                    m.d.sync += [esize_log2.eq(1), out_n.eq(Mux(trans, d.dev_rows, d.dev_cols))]
                with m.If(dec.status != Status.OK):
                    m.next = "COMPLETE"
                with m.Elif(dec.paged):
                    m.next = "PAGES"
                with m.Elif(dec.is_compute):
                    m.next = "GROUP"
                with m.Else():
                    m.next = "COPY_START"
            with m.State("PAGES"):
                # a paged ATTENTION waits for the front end's verdict on its list
                m.d.comb += front.verdict.ready.eq(1)
                with m.If(front.verdict.valid):
                    m.d.sync += status.eq(front.verdict.payload)
                    with m.If(front.verdict.payload == Status.OK):
                        m.next = "GROUP"
                    with m.Else():
                        m.next = "COMPLETE"
            with m.State("COPY_START"):
                # load: device operand -> completion slot; store: submission slot -> device
                # operand (the front end started the read): one row of 32 elements a line
                with m.If(readout_free & writer_free):
                    src = Mux(dec.is_load, d.dev_addr, sq_slot + HEADER_BYTES)
                    dst = Mux(dec.is_load, cq_slot + HEADER_BYTES, d.dev_addr)
                    _, _, offset, beats = run_span(m, src, 0, d.dev_size << 5, cfg, "copy_span")
                    m.d.comb += [writer.start.eq(1), writer.from_stream.eq(1), writer.lines.eq(d.dev_size),
                                 writer.addr.eq(dst), packer.start.eq(1),
                                 packer.offset.eq(dst[:(cfg.beat_bytes - 1).bit_length()]),
                                 unpack.start.eq(1), unpack.offset.eq(offset), unpack.rows.eq(1),
                                 unpack.cols.eq(d.dev_size << 5), unpack.beats.eq(beats)]
                    m.next = "COPY"
            with m.State("COPY"):
                m.d.comb += [packer.w_valid.eq(unpack.valid), packer.w_data.eq(unpack.data),
                             packer.w_bytes.eq(unpack.count << 1), packer.w_last.eq(unpack.last),
                             unpack.hold.eq(~packer.w_ready)]
                with m.If(writer.idle):
                    m.next = "COMPLETE"

            # ---- a group of up to ROWS input rows
            with m.State("GROUP"):
                rows_now, elems_now = Signal(range(cfg.rows + 1)), Signal(44)
                m.d.comb += [rows_now.eq(Mux(last_group, tail_rows, cfg.rows)),
                             elems_now.eq(Mux(last_group, task.last_group_elems,
                                              d.in_cols << (cfg.rows.bit_length() - 1)))]
                _, _, offset, beats = run_span(m, sq_slot + HEADER_BYTES, in_elem, elems_now, cfg, "input_span")
                m.d.sync += [group_rows.eq(rows_now), group_bytes.eq(rows_now * row_bytes), stage.eq(0)]
                m.d.comb += [unpack.start.eq(1), unpack.offset.eq(offset), unpack.rows.eq(rows_now),
                             unpack.cols.eq(d.in_cols), unpack.beats.eq(beats)]
                m.next = "INPUT"
            with m.State("INPUT"):
                m.d.comb += [cu.in_we.eq(unpack.valid), cu.in_row.eq(unpack.row),
                             cu.in_word.eq(unpack.col[lane_bits:]), cu.in_data.eq(unpack.data)]
                with m.If(unpack.valid & unpack.last):
                    m.d.sync += row.eq(0)
                    with m.If(is_softmax):
                        m.next = "SFU_START"
                    with m.Else():
                        m.next = "STAGE"

            # ---- a stage: one weight matrix through the PE array (`stage` selects it)
            with m.State("STAGE"):
                m.next = "PLAN"
            with m.State("PLAN"):
                # the planner takes the stage once the compute unit may take its mode
                m.d.comb += planner.load.eq(cu.lanes_ready)
                with m.If(planner.ready & cu.lanes_ready):
                    m.d.comb += chunks.restart.eq(1)
                    with m.If(planner.has_full):
                        m.next = "WEIGHTS_START"
                    with m.Else():
                        m.next = "REST_START"

            # ---- the weights as one or two runs of the unpacker: the groups of whole packs
            # (K // pack rows of pack * N elements; transposed N // pack rows of S, pack * K),
            # then the last group (K % pack rows, N % pack rows of S) where they end; a tiled
            # stage's as a strided run per column tile (isa/pe_array.py)
            def start_run(rest):
                m.d.comb += [chunks.start.eq(1), chunks.rest.eq(rest), unpack.start.eq(1),
                             unpack.offset.eq(chunks.u_offset), unpack.rows.eq(chunks.u_rows),
                             unpack.cols.eq(chunks.u_cols), unpack.beats.eq(chunks.u_beats),
                             unpack.pair.eq(chunks.u_pair), unpack.strided.eq(chunks.u_strided),
                             unpack.stride.eq(chunks.u_stride)]

            with m.State("WEIGHTS_START"):
                start_run(rest=0)
                m.next = "WEIGHTS"
            with m.State("REST_START"):
                start_run(rest=1)
                m.next = "REST"
            with m.State("WEIGHTS"):
                m.d.comb += chunks.dispatch.eq(1)
                with m.If(chunks.run_done):
                    with m.If(chunks.more_tiles):
                        # a tiled stage's next column tile (its rest_rows are 0: no packing)
                        m.d.comb += chunks.tile_next.eq(1)
                        m.next = "WEIGHTS_START"
                    with m.Elif(planner.rest_rows.any()):
                        m.next = "REST_START"
                    with m.Else():
                        m.next = "DRAIN"
            with m.State("REST"):
                m.d.comb += chunks.dispatch.eq(1)
                with m.If(chunks.run_done):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                # the readout, begun when the last chunk's sums are written (PIPE_DEPTH
                # cycles after it, or a transposed row's value): results go out beside the
                # next stage (the other accumulator bank, which may start meanwhile), a
                # chain's words are waited for
                to_result = (dest == TO_RESULT16) | (dest == TO_RESULT32)
                with m.If(dest == TO_INPUT):
                    m.d.comb += lanes_stage.eq(1)
                with m.If(readout_free & (~to_result | writer_free) & ~anchors_due):
                    # its first fold read in the cycle drain is 1 (now, once it is 0)
                    start_readout(FROM_FOLD, dest, to_result, Mux(drain > 1, drain - 1, 0))
                    with m.If(to_result):
                        m.next = "GROUP_END"
                    with m.Else():
                        m.next = "READOUT_WAIT"
            with m.State("READOUT_WAIT"):
                # a chain's words into the input buffer (x A) or the output buffer (scores)
                with m.If(dest == TO_INPUT):
                    m.d.comb += lanes_stage.eq(1)
                m.d.comb += [cu.in_we.eq(readout.in_we), cu.in_row.eq(readout.buf_row),
                             cu.in_word.eq(readout.buf_word), cu.in_data.eq(readout.buf_data16),
                             cu.acc_we.eq(readout.acc_we), cu.acc_row.eq(readout.buf_row),
                             cu.acc_word.eq(readout.buf_word), cu.acc_data.eq(readout.buf_data32)]
                with m.If(readout.done):
                    m.d.sync += stage.eq(1)
                    with m.If(dest == TO_SCORES):
                        m.next = "SFU_START"
                    with m.Else():
                        m.next = "STAGE"

            # ---- the softmax unit, row by row: attention's scores, or SOFTMAX's input rows
            def sfu_ports():
                """The unit reads the row's buffer and writes FP16 words into its input bank."""
                m.d.comb += [cu.rd_en.eq(sfu.src_en), cu.rd_acc.eq(is_attention), cu.rd_row.eq(row),
                             cu.rd_addr.eq(sfu.src_addr), cu.in_we.eq(sfu.dst_en), cu.in_row.eq(row),
                             cu.in_word.eq(sfu.dst_addr), cu.in_data.eq(sfu.dst_data)]

            with m.State("SFU_START"):
                sfu_ports()
                m.d.sync += sfu_row.eq(row)
                m.d.comb += [sfu.start.eq(1),
                             sfu.length.eq(Mux(is_attention, Mux(d.flags.trans_w, d.dev_rows, d.dev_cols), d.in_cols)),
                             sfu.partial.eq(is_attention | partial)]
                m.next = "SFU_RUN"
            with m.State("SFU_RUN"):
                sfu_ports()
                last_row = row + 1 >= group_rows
                with m.If(is_attention & last_row & (sfu.written | sfu.done)):
                    # the last row's probabilities are in: S V starts while the unit sums
                    # l; the anchors' lines go out once it has (the anchor poster, below)
                    m.d.sync += [row.eq(0), anchors_due.eq(1)]
                    m.next = "STAGE"
                with m.Elif(sfu.done):
                    with m.If(~last_row):
                        m.d.sync += row.eq(row + 1)
                        m.next = "SFU_START"
                    with m.Else():
                        m.d.sync += row.eq(0)
                        m.next = "BANK_START"

            # ---- SOFTMAX's rows, read back from the input buffer a word at a time
            with m.State("BANK_START"):
                with m.If(readout_free & writer_free):
                    start_readout(FROM_INPUT, TO_RESULT16, 1)
                    m.next = "BANK_OUT"
            with m.State("BANK_OUT"):
                # the next group's input goes into these banks: wait for the last word
                m.d.comb += [cu.rd_en.eq(readout.rd_en), cu.rd_row.eq(readout.rd_row), cu.rd_addr.eq(readout.rd_addr)]
                with m.If(readout.done):
                    with m.If(partial):
                        m.d.sync += anchors_due.eq(1)
                        m.next = "ANCHORS"
                    with m.Else():
                        m.next = "GROUP_END"
            with m.State("ANCHORS"):
                # SOFTMAX's anchor lines (the poster): the group ends with the last one posted
                with m.If(anchor_post & anchor_last):
                    m.next = "GROUP_END"
            with m.State("GROUP_END"):
                m.d.sync += [m0.eq(m0 + cfg.rows), in_elem.eq(in_elem + cfg.rows * d.in_cols),
                             last_group.eq(m_rows - m0 <= 2 * cfg.rows)]
                with m.If(m0 + cfg.rows < m_rows):
                    m.next = "GROUP"
                with m.Else():
                    m.next = "COMPLETE"

            with m.State("COMPLETE"):
                # the completion waits, in order, for every result write to be answered (the
                # writer is busy with the results' run until the readout's last line)
                with m.If(~completion.pending):
                    m.d.comb += [completion.complete.eq(1), completion.queue.eq(entry.queue),
                                 completion.seq.eq(entry.seq), completion.taken.eq(entry.taken),
                                 completion.status.eq(status), completion.read_error.eq(read_error | took_error),
                                 completion.slot.eq(cq_slot), completion.store.eq((status == Status.OK) & dec.is_store)]
                    m.next = "IDLE"

        # ---- completions: the line once every write before it is answered, then, once the
        # line is answered, HEAD, STATUS and the interrupt. A waiting readout job with results is
        # the pending descriptor's own (a later one starts no write run while a completion is
        # pending): its line waits for that run
        m.d.comb += [completion.cycle.eq(self.cycle), completion.hold.eq(readout.waiting_results),
                     completion.quiet.eq(writer.quiet), completion.write_error.eq(writer.write_error),
                     completion.reported.eq(writer.reported), completion.reported_error.eq(writer.reported_error),
                     completion.irq_en.eq(Cat(q.irq_en for q in self.queues))]
        with m.If(completion.line_start):
            m.d.comb += [writer.start.eq(1), writer.addr.eq(completion.line_addr), writer.line.eq(completion.line),
                         writer.strb.eq((1 << cfg.port_bytes) - 1), writer.report.eq(1)]
        m.d.comb += [self.done_valid.eq(completion.done_valid), self.done_queue.eq(completion.done_queue),
                     self.done_seq.eq(completion.done_seq), self.done_status.eq(completion.done_status),
                     self.irq.eq(completion.irq),
                     front.report.eq(completion.done_valid), front.report_store.eq(completion.done_store)]
        return m


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
  A paged ATTENTION's task carries the front end's verdict on its page list (checked
  before the descriptor moved to slot 1); with OK it runs as ATTENTION with TRANS_W, its
  stages' beats (read from the pages by the front end) unpacked as one operand's at
  virtual address 0; else it completes with the verdict (BAD_PAGE, DRAM_ERROR), nothing
  else read. A decode step's ATTENTION (one query row, keys token-major) runs q K^T on
  PE row 0 over input row 0 and S V on PE row 1 over input row 1, where the softmax unit
  writes its probabilities (isa/pe_array.py Route.of_stage).
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
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out

from isa import Status, Op
from isa.pe_array import SPLIT_ROWS, Route
from isa.descriptor import DIM_BITS
from isa.slots import HEADER_BYTES
from .axi import device_bus, AXI4Signature
from .command_engine import ibuf_entry
from .completion import Completion, report_layout
from .compute_unit import ComputeUnit
from .dram_reader import DramReader
from .dram_writer import DramWriter
from .fp import fp16_to_fp32
from .front_end import FrontEnd, task_layout
from .line_packer import LinePacker
from .readout import Dest, Readout, Source
from .regfile import QueueRegs
from .softmax_unit import SoftmaxUnit
from .chunk_dispatch import ChunkDispatch
from .stage_plan import run_span, stage_operand
from .shared_port import SharedPort
from .stage_planner import StagePlanner
from .unpacker import Unpacker


class Phase(enum.Enum):
    """The control unit's phase: the state of its FSM, which picks the sources of the
    shared ports (hw/shared_port.py)."""
    IDLE = 0            # waiting for the front end's next descriptor
    DECODE = 1          # taking what the decoder found
    COPY_START = 3      # LOAD / STORE: the write run and the unpacker's job
    COPY = 4            # ... its lines through the unpacker into the line packer
    GROUP = 5           # a group of up to ROWS input rows: their run
    INPUT = 6           # ... the rows into the input buffer
    STAGE = 7           # a stage: one weight matrix through the PE array
    PLAN = 8            # ... its plan, once the compute unit may take its mode
    WEIGHTS_START = 9   # ... the run of whole packs (or a column tile)
    WEIGHTS = 10        # ... its chunks into the PE rows
    REST_START = 11     # ... the last k-group's run
    REST = 12           # ... its chunks
    DRAIN = 13          # ... its readout given once the last sums are written
    READOUT_WAIT = 14   # a chain's words into the input or the output buffer
    SFU_START = 15      # the softmax unit on a row
    SFU_RUN = 16        # ... running
    BANK_START = 17     # SOFTMAX's rows: their readout
    BANK_OUT = 18       # ... read back from the input buffer
    ANCHORS = 19        # SOFTMAX's anchor lines
    GROUP_END = 20      # the next group, or the completion
    COMPLETE = 21       # the completion, once every result write is answered


class ControlUnit(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        self._cfg, self._shared = cfg, shared_cells
        nq = cfg.num_queues
        super().__init__({
            "bus": Out(device_bus(cfg)),
            "queues": In(QueueRegs).array(nq),
            "cycle": In(64),
            "pop": In(stream.Signature(ibuf_entry(cfg))),
            # completion report to the register file, and the interrupt pulse
            "done": Out(stream.Signature(report_layout(cfg), always_ready=True)),
            "irq": Out(nq),
            # the FSM's phase (for benches and monitors; the control unit's own state)
            "phase": Out(Phase),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes, lane_bits = cfg.lanes, (cfg.lanes - 1).bit_length()
        line_log2 = (cfg.port_bytes - 1).bit_length()
        phase = self.phase
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
        wiring.connect(m, wiring.flipped(self.pop), front.pop)
        wiring.connect(m, front.run, reader.run)
        wiring.connect(m, reader.side, front.side)
        m.d.comb += front.run_issued.eq(reader.issued_all)

        # the descriptor taken from the front end, with what its decoder found
        task = Signal(task_layout(cfg))
        entry, dec = task.entry, task.decoded
        d = entry.desc

        status = Signal(8)
        sq_slot, cq_slot = Signal(64), Signal(64)
        # DRAM errors of the beats the current descriptor took (the completion adds its writes')
        read_error = Signal()
        took_error = reader.out.valid & reader.out.ready & reader.out.payload.err
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
        dest = Signal(Dest)
        m.d.comb += dest.eq(Mux(stage, Mux(is_attention, Dest.RESULT32, Dest.RESULT16),
                                Mux(is_attention, Dest.SCORES, Mux(is_xab, Dest.INPUT, Dest.RESULT16))))
        # a decode step's ATTENTION (isa/validate.py decode_attention) has q K^T on PE row 0
        # over input row 0 and S V on PE row 1 over input row 1, where its probabilities go;
        # any other stage of one input row spreads its k-groups over PE rows 0 and 1
        # (isa/pe_array.py); a transposed stage does not (its chunks fill the lanes)
        decode_unit, split = Signal(), Signal()
        m.d.comb += [decode_unit.eq(is_attention & d.flags.trans_w & (m_rows == 1)),
                     split.eq((m_rows == 1) & ~st_trans & ~decode_unit)]
        # isa/pe_array.py Route.of_stage
        route = Mux(decode_unit, Mux(stage, Route.ROW1, Route.ROW0), Mux(split, Route.SPLIT, Route.ALL))
        m.d.comb += [planner.stage.payload.eq(dec.stages[stage]),
                     planner.route.eq(route), planner.pipe_busy.eq(chunks.pipe_busy),
                     chunks.addr.eq(st_addr), chunks.route.eq(route), chunks.plan.eq(planner.plan)]
        # the compute unit's mode (transposed, its tree) is the plan's: it changes at PLAN
        # only when the pipeline holds no chunk of another mode
        # the lanes' packed rows take LANE_ROW_STAGES cycles to follow N (hw/compute_unit.py
        # lanes_ready): after x A's last chunk they follow . B's N (DRAIN, READOUT_WAIT below),
        # so its PLAN does not wait for them; a decode step's follow S V's N throughout (a
        # transposed stage's lanes take no N)
        lanes_stage = Signal()
        _, _, lanes_n, _ = stage_operand(d, dec.second_addr, lanes_stage)
        m.d.comb += lanes_stage.eq(stage | decode_unit | (((phase == Phase.DRAIN) | (phase == Phase.READOUT_WAIT))
                                                          & (dest == Dest.INPUT)))
        m.d.comb += [cu.n_cols.eq(lanes_n), cu.split.eq(split), cu.t_chunk.eq(chunks.t_chunk)]
        for q in range(SPLIT_ROWS):
            # (every PE row in the stage's mode: one stage at a time)
            m.d.comb += cu.mode[q].eq(planner.plan.mode)
            wiring.connect(m, chunks.pe[q], cu.pe[q])
        # the unpacker's slots: to the PE rows (the dispatch takes them while it dispatches),
        # the input buffer or the line packer (a copy's, which it may hold back)
        slot = unpack.slot.payload
        m.d.comb += [chunks.slot.valid.eq(unpack.slot.valid), chunks.slot.payload.eq(slot),
                     unpack.slot.ready.eq(Mux(phase == Phase.COPY, packer.w.ready, 1))]
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
        m.d.comb += [bank.eq(acc_bank) for bank in cu.bank]
        anchors_m = Array(Signal(32, name=f"anchor_m{r}") for r in range(cfg.rows))
        anchors_l = Array(Signal(32, name=f"anchor_l{r}") for r in range(cfg.rows))

        # the readout: its fold requests and sums, its words to the packer or the buffers
        wiring.connect(m, readout.fold, cu.fold)
        wiring.connect(m, cu.sum, readout.sum)
        m.d.comb += [readout.rd_in_data.eq(cu.rd_in_data), readout.w.ready.eq(packer.w.ready)]
        readout_free = ~readout.busy & ~readout.waiting

        # ---- the shared ports: each picks its one source (hw/shared_port.py), every source
        # added below; the mux and its assertion once all are in (the end of elaborate)
        full_strobe = (1 << cfg.port_bytes) - 1
        writer_job = SharedPort("writer's job", start=writer.job.valid,
                                **{name: writer.job.payload[name] for name in writer.job.payload.shape().members})
        packer_run = SharedPort("line packer's run", start=packer.start, offset=packer.offset)
        packer_words = SharedPort("line packer's words", valid=packer.w.valid, data=packer.w.payload.data,
                                  bytes=packer.w.payload.bytes, last=packer.w.payload.last)
        unpacker_job = SharedPort("unpacker's job", valid=unpack.job.valid,
                                  **{name: unpack.job.payload[name] for name in unpack.job.payload.shape().members})
        readout_job = SharedPort("readout's job", valid=readout.job.valid,
                                 **{name: readout.job.payload[name] for name in readout.job.payload.shape().members})
        in_write = SharedPort("input buffer's write port", we=cu.in_we, row=cu.in_row, word=cu.in_word,
                              data=cu.in_data)
        buffer_read = SharedPort("buffers' read port", en=cu.rd_en, acc=cu.rd_acc, row=cu.rd_row, addr=cu.rd_addr)
        shared_ports = (writer_job, packer_run, packer_words, unpacker_job, readout_job, in_write, buffer_read)

        # a results job's write run, as the job begins; its words
        writer_job.source("results", readout.run.valid, start=1, from_stream=1, addr=readout.run.payload.addr,
                          lines=readout.run.payload.lines)
        packer_run.source("results", readout.run.valid, start=1, offset=readout.run.payload.offset)
        packer_words.source("results", phase != Phase.COPY, valid=readout.w.valid, data=readout.w.payload.data,
                            bytes=readout.w.payload.bytes, last=readout.w.payload.last)

        def readout_source(name, when, source, job_dest, results, delay):
            """Give the readout the stage just ended (or SOFTMAX's rows) and, with `results`,
            the group's write run (the group's results go after it), to begin `delay` cycles
            later."""
            first = Signal(64, name=f"result_first_{name}")     # the byte address of its first byte
            m.d.comb += first.eq(cq_slot + HEADER_BYTES + out_byte)
            plan = planner.plan
            readout_job.source(name, when, valid=1, delay=delay, source=source, dest=job_dest, rows=group_rows,
                               row=Mux(decode_unit & stage, 1, 0) if source == Source.FOLD else 0,
                               n=st_n if source == Source.FOLD else out_n, n_words=plan.n_words,
                               sets=planner.sets_used[0], sets1=planner.sets_used[1], pack_log2=plan.pack_log2,
                               bank=acc_bank, results=results, first=first,
                               lines=(first[:line_log2] + group_bytes + cfg.port_bytes - 1) >> line_log2)

        def readout_taken(results, source):
            """The group's results go after this job's; a stage's makes the next stage write
            the other accumulator bank."""
            with m.If(results):
                m.d.sync += out_byte.eq(out_byte + group_bytes)
            if source == Source.FOLD:
                m.d.sync += acc_bank.eq(~acc_bank)

        # a stage's readout, begun when the last chunk's sums are written (PIPE_DEPTH cycles
        # after it, or a transposed row's value): results go out beside the next stage (the
        # other accumulator bank, which may start meanwhile), a chain's words are waited for;
        # its first fold read in the cycle drain is 1 (now, once it is 0)
        to_result = (dest == Dest.RESULT16) | (dest == Dest.RESULT32)
        stage_out = Signal()
        readout_source("stage", stage_out, Source.FOLD, dest, to_result, Mux(drain > 1, drain - 1, 0))
        # SOFTMAX's rows, read back from the input buffer a word at a time
        rows_out = Signal()
        readout_source("rows", rows_out, Source.INPUT, Dest.RESULT16, 1, 0)

        # the softmax unit reads one row of the input buffer (widened to FP32 by a format
        # converter a lane) or of the output buffer, and writes FP16 words into the input buffer
        widened = [fp16_to_fp32(m, cu.rd_in_data.word_select(j, 16), f"widened_{j}") for j in range(lanes)]
        m.d.comb += sfu.src_data.eq(Mux(is_attention, cu.rd_acc_data, Cat(*widened)))
        in_softmax = (phase == Phase.SFU_START) | (phase == Phase.SFU_RUN)
        buffer_read.source("softmax", in_softmax, en=sfu.src_en, acc=is_attention, row=row, addr=sfu.src_addr)
        # (a decode step's probabilities into input row 1, PE row 1's)
        in_write.source("softmax", in_softmax, we=sfu.dst_en, row=Mux(decode_unit, 1, row), word=sfu.dst_addr,
                        data=sfu.dst_data)
        buffer_read.source("rows", phase == Phase.BANK_OUT, en=readout.rd_en, row=readout.rd_row,
                           addr=readout.rd_addr)
        # the group's input rows, from the unpacker
        in_write.source("input", phase == Phase.INPUT, we=unpack.slot.valid, row=slot.row,
                        word=slot.col[lane_bits:], data=slot.data)
        # a chain's words into the input buffer (x A) or the output buffer (scores)
        in_write.source("chain", phase == Phase.READOUT_WAIT, we=readout.in_we, row=readout.buf_row,
                        word=readout.buf_word, data=readout.buf_data16)
        with m.If(phase == Phase.READOUT_WAIT):
            m.d.comb += [cu.acc_we.eq(readout.acc_we), cu.acc_row.eq(readout.buf_row),
                         cu.acc_word.eq(readout.buf_word), cu.acc_data.eq(readout.buf_data32)]

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
        writer_job.source("anchors", anchor_post, start=1,
                          addr=cq_slot + HEADER_BYTES + dec.stats_offset + ((m0 + anchor_row) << line_log2),
                          line=Cat(anchors_m[anchor_row], anchors_l[anchor_row]), strb=full_strobe)
        with m.If(anchor_post):
            with m.If(anchor_last):
                m.d.sync += [anchor_row.eq(0), anchors_due.eq(0)]
            with m.Else():
                m.d.sync += anchor_row.eq(anchor_row + 1)

        # ---- a copy: load, device operand -> completion slot; store, submission slot ->
        # device operand (the front end started the read): one row of 32 elements a line
        copy_go = Signal()
        copy_src = Mux(dec.is_load, d.dev_addr, sq_slot + HEADER_BYTES)
        copy_dst = Mux(dec.is_load, cq_slot + HEADER_BYTES, d.dev_addr)
        _, _, copy_offset, copy_beats = run_span(m, copy_src, 0, d.dev_size << 5, cfg, "copy_span")
        writer_job.source("copy", copy_go, start=1, from_stream=1, lines=d.dev_size, addr=copy_dst)
        packer_run.source("copy", copy_go, start=1, offset=copy_dst[:(cfg.beat_bytes - 1).bit_length()])
        unpacker_job.source("copy", copy_go, valid=1, offset=copy_offset, rows=1, cols=d.dev_size << 5,
                            beats=copy_beats)
        packer_words.source("copy", phase == Phase.COPY, valid=unpack.slot.valid, data=slot.data,
                            bytes=slot.count << 1, last=slot.last)

        # ---- a group of up to ROWS input rows: its rows' run from the submission slot
        rows_now, elems_now = Signal(range(cfg.rows + 1)), Signal(44)
        m.d.comb += [rows_now.eq(Mux(last_group, tail_rows, cfg.rows)),
                     elems_now.eq(Mux(last_group, task.last_group_elems, d.in_cols << (cfg.rows.bit_length() - 1)))]
        _, _, input_offset, input_beats = run_span(m, sq_slot + HEADER_BYTES, in_elem, elems_now, cfg, "input_span")
        unpacker_job.source("input", phase == Phase.GROUP, valid=1, offset=input_offset, rows=rows_now,
                            cols=d.in_cols, beats=input_beats)

        # ---- a stage's weights as one or two runs of the unpacker: the groups of whole packs
        # (K // pack rows of pack * N elements; transposed N // pack rows of S, pack * K),
        # then the last group (K % pack rows, N % pack rows of S) where they end; a tiled
        # stage's as a strided run per column tile (isa/pe_array.py)
        run_start = (phase == Phase.WEIGHTS_START) | (phase == Phase.REST_START)
        m.d.comb += [chunks.start.eq(run_start), chunks.rest.eq(phase == Phase.REST_START),
                     chunks.dispatch.eq((phase == Phase.WEIGHTS) | (phase == Phase.REST))]
        unpacker_job.source("weights", run_start, valid=1,
                            **{name: chunks.job[name] for name in chunks.job.shape().members})

        with m.Switch(phase):
            with m.Case(Phase.IDLE):
                m.d.comb += front.task.ready.eq(1)
                with m.If(front.task.valid):
                    m.d.sync += [task.eq(front.task.payload), phase.eq(Phase.DECODE)]
            with m.Case(Phase.DECODE):
                # (a paged ATTENTION's list verdict: the front end checked its list before the move)
                m.d.sync += [status.eq(Mux(dec.status != Status.OK, dec.status, task.verdict)), read_error.eq(0),
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
                with m.If((dec.status != Status.OK) | (task.verdict != Status.OK)):
                    m.d.sync += phase.eq(Phase.COMPLETE)
                with m.Elif(dec.is_compute):
                    m.d.sync += phase.eq(Phase.GROUP)
                with m.Else():
                    m.d.sync += phase.eq(Phase.COPY_START)
            with m.Case(Phase.COPY_START):
                with m.If(readout_free & writer_free):
                    m.d.comb += copy_go.eq(1)
                    m.d.sync += phase.eq(Phase.COPY)
            with m.Case(Phase.COPY):
                with m.If(writer.idle):
                    m.d.sync += phase.eq(Phase.COMPLETE)

            # ---- a group of up to ROWS input rows
            with m.Case(Phase.GROUP):
                m.d.sync += [group_rows.eq(rows_now), group_bytes.eq(rows_now * row_bytes), stage.eq(0),
                             phase.eq(Phase.INPUT)]
            with m.Case(Phase.INPUT):
                with m.If(unpack.slot.valid & slot.last):
                    m.d.sync += row.eq(0)
                    with m.If(is_softmax):
                        m.d.sync += phase.eq(Phase.SFU_START)
                    with m.Else():
                        m.d.sync += phase.eq(Phase.STAGE)

            # ---- a stage: one weight matrix through the PE array (`stage` selects it)
            with m.Case(Phase.STAGE):
                m.d.sync += phase.eq(Phase.PLAN)
            with m.Case(Phase.PLAN):
                # the planner takes the stage once the compute unit may take its mode
                m.d.comb += planner.stage.valid.eq(cu.lanes_ready)
                with m.If(planner.stage.ready & cu.lanes_ready):
                    m.d.comb += chunks.restart.eq(1)
                    with m.If(planner.has_full):
                        m.d.sync += phase.eq(Phase.WEIGHTS_START)
                    with m.Else():
                        m.d.sync += phase.eq(Phase.REST_START)
            with m.Case(Phase.WEIGHTS_START):
                m.d.sync += phase.eq(Phase.WEIGHTS)
            with m.Case(Phase.REST_START):
                m.d.sync += phase.eq(Phase.REST)
            with m.Case(Phase.WEIGHTS):
                with m.If(chunks.run_done):
                    with m.If(chunks.more_tiles):
                        # a tiled stage's next column tile (its rest_rows are 0: no packing)
                        m.d.comb += chunks.tile_next.eq(1)
                        m.d.sync += phase.eq(Phase.WEIGHTS_START)
                    with m.Elif(planner.plan.rest_rows.any()):
                        m.d.sync += phase.eq(Phase.REST_START)
                    with m.Else():
                        m.d.sync += phase.eq(Phase.DRAIN)
            with m.Case(Phase.REST):
                with m.If(chunks.run_done):
                    m.d.sync += phase.eq(Phase.DRAIN)
            with m.Case(Phase.DRAIN):
                with m.If(readout_free & (~to_result | writer_free) & ~anchors_due):
                    m.d.comb += stage_out.eq(1)
                    readout_taken(to_result, Source.FOLD)
                    with m.If(to_result):
                        m.d.sync += phase.eq(Phase.GROUP_END)
                    with m.Else():
                        m.d.sync += phase.eq(Phase.READOUT_WAIT)
            with m.Case(Phase.READOUT_WAIT):
                with m.If(readout.done):
                    m.d.sync += stage.eq(1)
                    with m.If(dest == Dest.SCORES):
                        m.d.sync += phase.eq(Phase.SFU_START)
                    with m.Else():
                        m.d.sync += phase.eq(Phase.STAGE)

            # ---- the softmax unit, row by row: attention's scores, or SOFTMAX's input rows
            with m.Case(Phase.SFU_START):
                m.d.sync += [sfu_row.eq(row), phase.eq(Phase.SFU_RUN)]
                m.d.comb += [sfu.start.eq(1),
                             sfu.length.eq(Mux(is_attention, Mux(d.flags.trans_w, d.dev_rows, d.dev_cols), d.in_cols)),
                             sfu.partial.eq(is_attention | partial)]
            with m.Case(Phase.SFU_RUN):
                last_row = row + 1 >= group_rows
                with m.If(is_attention & last_row & (sfu.written | sfu.done)):
                    # the last row's probabilities are in: S V starts while the unit sums
                    # l; the anchors' lines go out once it has (the anchor poster, above)
                    m.d.sync += [row.eq(0), anchors_due.eq(1), phase.eq(Phase.STAGE)]
                with m.Elif(sfu.done):
                    with m.If(~last_row):
                        m.d.sync += [row.eq(row + 1), phase.eq(Phase.SFU_START)]
                    with m.Else():
                        m.d.sync += [row.eq(0), phase.eq(Phase.BANK_START)]

            # ---- SOFTMAX's rows, read back from the input buffer a word at a time
            with m.Case(Phase.BANK_START):
                with m.If(readout_free & writer_free):
                    m.d.comb += rows_out.eq(1)
                    readout_taken(1, Source.INPUT)
                    m.d.sync += phase.eq(Phase.BANK_OUT)
            with m.Case(Phase.BANK_OUT):
                # the next group's input goes into these banks: wait for the last word
                with m.If(readout.done):
                    with m.If(partial):
                        m.d.sync += [anchors_due.eq(1), phase.eq(Phase.ANCHORS)]
                    with m.Else():
                        m.d.sync += phase.eq(Phase.GROUP_END)
            with m.Case(Phase.ANCHORS):
                # SOFTMAX's anchor lines (the poster): the group ends with the last one posted
                with m.If(anchor_post & anchor_last):
                    m.d.sync += phase.eq(Phase.GROUP_END)
            with m.Case(Phase.GROUP_END):
                m.d.sync += [m0.eq(m0 + cfg.rows), in_elem.eq(in_elem + cfg.rows * d.in_cols),
                             last_group.eq(m_rows - m0 <= 2 * cfg.rows)]
                with m.If(m0 + cfg.rows < m_rows):
                    m.d.sync += phase.eq(Phase.GROUP)
                with m.Else():
                    m.d.sync += phase.eq(Phase.COMPLETE)

            with m.Case(Phase.COMPLETE):
                # the completion waits, in order, for every result write to be answered (the
                # writer is busy with the results' run until the readout's last line)
                with m.If(~completion.pending):
                    handed = completion.complete.payload
                    m.d.comb += [completion.complete.valid.eq(1), handed.queue.eq(entry.queue),
                                 handed.seq.eq(entry.seq), handed.taken.eq(entry.taken),
                                 handed.status.eq(status), handed.read_error.eq(read_error | took_error),
                                 handed.slot.eq(cq_slot), handed.store.eq((status == Status.OK) & dec.is_store)]
                    m.d.sync += phase.eq(Phase.IDLE)

        # ---- completions: the line once every write before it is answered, then, once the
        # line is answered, HEAD, STATUS and the interrupt. A waiting readout job with results is
        # the pending descriptor's own (a later one starts no write run while a completion is
        # pending): its line waits for that run
        m.d.comb += [completion.cycle.eq(self.cycle), completion.hold.eq(readout.waiting_results),
                     completion.quiet.eq(writer.quiet), completion.write_error.eq(writer.write_error),
                     completion.reported.eq(writer.reported), completion.reported_error.eq(writer.reported_error),
                     completion.irq_en.eq(Cat(q.irq_en for q in self.queues))]
        writer_job.source("completion", completion.line_start, start=1, addr=completion.line_addr,
                          line=completion.line, strb=full_strobe, report=1)
        wiring.connect(m, completion.done, wiring.flipped(self.done))
        m.d.comb += [self.irq.eq(completion.irq),
                     front.report.eq(completion.done.valid), front.report_store.eq(completion.done.payload.store)]

        for port in shared_ports:
            port.elaborate(m)
        return m


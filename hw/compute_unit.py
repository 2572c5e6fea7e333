"""The compute unit: input buffer, output buffer of FP32 partial sums, the PE array and the
fold unit that reads results out. The arithmetic order is `isa/pe_array.py`'s.

Input buffer: one bank per row, `k_max` FP16 elements each, written a chunk at a time; one
read-write port (a 1RW macro), shared by the writes, the PE row's operand fetch and the
reads asked on `rd_*`, which never meet in a cycle (asserted in simulation). The fetch
holds the line it read: a chunk of the same input line (the words of a row or a column
tile, packed groups within the line) takes it from there and reads none.
Output buffer: per row two accumulator banks (one fills while the other is read out), each
its own memory of `n_max / LANES` words of LANES FP32 partial sums, with one read port
and one write port (a 1R1W macro). The PE array only writes the bank it fills: each PE
row keeps the partial sums it adds into in ACC_SLOTS slot registers of a line
(isa/pe_array.py: a stage's words at once, or a column tile's) and writes a word's set
into the bank once, from the set's last chunk. The read port serves the bank read out:
the fold unit's first read of a word, its operand read or a read asked on `rd_*`. The
port's sources never meet in a cycle (the control unit's phases keep them apart, the fold
unit never reads twice in a cycle); an assertion in simulation says so.

PE array: ROWS x LANES pipelined MACs. A weight chunk (one k-group: `pack` packed rows of
W, or one LANES-column word of one row) enters per cycle with its accumulator address
(set * n_words + word), `first` (the group is its set's first: add to +0), the element
index `k_base` of its first packed row and its active lane count. Lane j takes the input
x[row][k_base + j // N] (j // N is the packed row; 0 without packing), so one chunk
updates, for every row, LANES partial sums:

    cycle 0  operand fetch: input word, x per lane (hw/operand_select.py), registered with the chunk
    cycle 1  multiplier stage 1          (FP16 x FP16 -> exact FP32, 2 stages)
    cycle 2  multiplier stage 2, product registered
    cycle 3  slot read; adder stage 1   (FP32 + FP32 RNE, 3 stages)
    cycle 4  adder stage 2
    cycle 5  adder stage 3, slot written (and, with `last`, the accumulator word)

so a slot is read again at the earliest ACC_INTERLEAVE = 3 cycles after its last read:
the sets' interleave and the column tiles' width keep a chunk from reading a slot in flight.

PE row 1 takes the chunks of `pe[1]`, every other row those of `pe[0]` (the chunk dispatch
sends a chunk for every row on both). With `split` (a stage of one input row,
isa/pe_array.py) `pe[1]` carries the odd k-groups, `pe[0]` the even ones, and every write
into input row 0 goes into input row 1 as well, so both rows multiply by the same input.

Each PE row has its mode (`mode[q]`, q as `pe[q]`): the two can run a transposed stage on
row 0 and a plain one on row 1, over its own input row, at once (PE row 1 transposed only
in row 0's mode). The control unit gives both the stage's mode today;
`tests/unit/test_compute_unit.py` runs them in different modes.

Fold unit (`hw/fold_unit.py`, one, shared by the rows): reads the results out a word per
request, the word's sets in order (with `split`, PE row 0's, then row 1's), then the packed
rows pairwise, and hands out the sums in FP32 and rounded to FP16, in request order.

For the chains and the softmax unit, the control unit can also write a word into the
output buffer (`acc_*`: attention's folded scores) and read one row's input or output
buffer synchronously (`rd_*`: the softmax unit's source, SOFTMAX's rows read back).
`tests/unit/test_compute_unit.py` runs this block alone against the golden model.
"""
from amaranth import Const, Module, Mux, Signal, Cat, unsigned
from amaranth.hdl import Assert
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from isa.microarch import ADD_CYCLES, LANE_ROW_STAGES, PIPE_DEPTH, PRODUCT_CYCLES
from isa.pe_array import ACC_INTERLEAVE, ACC_SLOTS, SPLIT_ROWS, trans_line_cycles
from isa.descriptor import DIM_BITS
from .fp import ADD_STAGES, MUL_STAGES
from .fold_unit import FoldUnit, fold_request_layout, sum_layout
from .chunk_dispatch import chunk_stream, trans_chunk_layout
from .fp_cells import add_cell
from .fifo import SINGLE_PORT_ATTR
from .operand_select import OperandSelect
from .stage_planner import mode_layout

FETCH_STAGES = 1                                 # operand fetch, before the multiplier
READ_STAGE = FETCH_STAGES + MUL_STAGES           # cycles from a chunk to its accumulator read
assert ADD_STAGES == ACC_INTERLEAVE, "the interleave of isa/pe_array.py is the adder's depth"
assert (READ_STAGE, ADD_STAGES) == (PRODUCT_CYCLES, ADD_CYCLES), "isa/microarch.py's cycles are the pipeline's"
assert PIPE_DEPTH == READ_STAGE + ADD_STAGES      # cycles from a chunk to its accumulator visible


def row_mode(r):
    """The index of PE row r's mode, chunk stream and lane rows: PE row 1 has its own (the
    split's second row), every other row row 0's."""
    return 1 if r == 1 else 0


def tree_node(level, i, lanes):
    """The lane adder that is node i of the reduction tree's level (1 ..): level 1 on
    adders 0 .. LANES/2 - 1, level 2 on the next LANES/4, and so on (LANES - 1 in all)."""
    return lanes - (lanes >> (level - 1)) + i


class ComputeUnit(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        self._cfg, self._shared = cfg, shared_cells
        lanes, rows = cfg.lanes, cfg.rows
        self.k_words, self.acc_depth = cfg.k_max // lanes, cfg.n_max // lanes
        super().__init__({
            # input buffer fill
            "in_we": In(1), "in_row": In(range(rows)), "in_word": In(range(self.k_words)),
            "in_data": In(16 * lanes),
            # the descriptor's N (for the packed-row of each lane), and one input row (input
            # row 0's writes go into row 1 as well)
            "n_cols": In(DIM_BITS), "split": In(1),
            # per PE row (as `pe`), the accumulator bank its chunks write (each carries it
            # through the pipeline); the bank the fold unit (and the acc_* / rd_* ports)
            # use, `fold`'s `bank`: two banks, so one is read out while the other fills
            "bank": In(1).array(SPLIT_ROWS),
            # per PE row (mode[1]: PE row 1's, mode[0]: every other row's), plain or a
            # transposed stage's (TRANS_W, isa/pe_array.py trans_plan): the tree level of a
            # row's value, whether a row takes several chunks and the adds of its sets. A
            # row's mode must hold while a chunk of it is in its pipeline (the control unit
            # changes it only when that is empty). The tree's control follows pe[0]'s chunks:
            # PE row 1 is transposed only in row 0's mode (asserted), so the two rows can run
            # a transposed stage (row 0) and a plain one (row 1) at once
            "mode": In(mode_layout(lanes)).array(SPLIT_ROWS),
            # with each chunk of it: the output it holds (its first), the chunk's set in its
            # row, whether it is its set's first, and the row's last
            "t_chunk": In(trans_chunk_layout()),
            # the PE rows' chunks (hw/chunk_dispatch.py chunk_layout): pe[1]'s to PE row 1,
            # pe[0]'s to every other (the dispatch sends a chunk for every row on both, or
            # with the split the odd k-groups on pe[1]); a chunk's `last`:
            # its partial sums are written into the output buffer (isa/pe_array.py: its group
            # is the last its PE row adds into its set)
            "pe": In(chunk_stream(lanes, self.acc_depth)).array(SPLIT_ROWS),
            # the fold unit (hw/fold_unit.py): requests for one word of one row, the sums in
            # request order; the plan of the stage read out: words per set, the sets that
            # received a k-group in the row and (split) in PE row 1, log2 of the packing
            "fold": In(stream.Signature(fold_request_layout(cfg, self.acc_depth))),
            "sum": Out(stream.Signature(sum_layout(lanes))),
            # a word written into the output buffer from outside the PE array (attention's
            # folded scores, for the softmax unit)
            "acc_we": In(1), "acc_row": In(range(rows)), "acc_word": In(range(self.acc_depth)),
            "acc_data": In(32 * lanes),
            # synchronous reads of one row's buffers (the softmax unit's source, result
            # rows read back from the input buffer): data the cycle after a read asked
            # (`rd_en`; of the output buffer's bank read out with `rd_acc`, else the input's)
            "rd_en": In(1), "rd_acc": In(1),
            "rd_row": In(range(rows)), "rd_addr": In(range(max(self.k_words, self.acc_depth))),
            "rd_in_data": Out(16 * lanes), "rd_acc_data": Out(32 * lanes),
            # the lanes' packed rows follow `n_cols` (_lane_rows): a stage starts once they do
            "lanes_ready": Out(1),
        })

    def _lane_rows(self, m, lanes, lane_bits, lane_rows):
        """Each lane's packed row, registered per mode (`lane_rows[q]`: the rows in
        mode[q]'s): j // N by restoring division of the lane's
        constant j, LANE_ROW_STAGES registered steps of a few quotient bits each (a divider
        a lane in one cycle was the unit's deepest path); `lanes_ready` once N has held for
        that many cycles (a stage's N changes at least that long before its first chunk, so
        the control unit's PLAN never waits for it today; it would, rather than fetch with
        stale rows, if it did). Transposed: lane j takes x[k_base + (j mod K)] with packed
        rows (K = 2^t_level), x[k_base + j] else (t_level = log2 LANES), one register. One
        divider serves both modes: two rows in different modes are a transposed one, which
        takes no quotient, and a plain one."""
        n = self.n_cols[:lane_bits + 1]
        held, n_last = Signal(range(LANE_ROW_STAGES + 1)), Signal.like(self.n_cols)
        m.d.sync += n_last.eq(self.n_cols)
        m.d.sync += held.eq(Mux(self.n_cols != n_last, 0, Mux(held == LANE_ROW_STAGES, held, held + 1)))
        m.d.comb += self.lanes_ready.eq((held == LANE_ROW_STAGES) & (self.n_cols == n_last))
        level_masks = [Signal(lane_bits, name=f"level_mask{q}") for q in range(SPLIT_ROWS)]
        m.d.comb += [mask.eq((Const(1, lane_bits + 1) << mode.t_level) - 1)
                     for mask, mode in zip(level_masks, self.mode)]
        steps = -(-lane_bits // LANE_ROW_STAGES)            # quotient bits per stage
        for j in range(lanes):
            rem, quo = Const(0, lane_bits + 1), Const(0, lane_bits)
            for stage in range(LANE_ROW_STAGES):
                for bit in reversed(range(lane_bits - (stage + 1) * steps, lane_bits - stage * steps)):
                    if bit < 0:
                        continue
                    shifted = Cat(Const((j >> bit) & 1, 1), rem)[:lane_bits + 1]
                    fits = shifted >= n
                    rem = Mux(fits, shifted - n, shifted)[:lane_bits + 1]
                    quo = quo | (fits << bit)
                if stage + 1 < LANE_ROW_STAGES:
                    rem_r = Signal(lane_bits + 1, name=f"lane_rem{j}_s{stage}")
                    quo_r = Signal(lane_bits, name=f"lane_quo{j}_s{stage}")
                    m.d.sync += [rem_r.eq(rem), quo_r.eq(quo)]
                    rem, quo = rem_r, quo_r
            packed = Mux((self.n_cols > lanes) | (n == 0), 0, quo)
            for lane_row, mode, mask in zip(lane_rows, self.mode, level_masks):
                m.d.sync += lane_row[j].eq(Mux(mode.trans, Const(j, lane_bits) & mask, packed))

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes, rows = cfg.lanes, cfg.rows

        lane_bits = (lanes - 1).bit_length()

        # the packed row of each lane, j // N (0 when N > j, and for N = 0, as Amaranth's x // 0),
        # per mode
        lane_rows = [[Signal(range(lanes), name=f"lane_row{j}" if q == 0 else f"lane_row{j}_m{q}")
                      for j in range(lanes)] for q in range(SPLIT_ROWS)]
        self._lane_rows(m, lanes, lane_bits, lane_rows)
        # PE row r's mode and lane rows (PE row 1 has its own: the split's second row)
        mode0 = self.mode[0]
        m.d.sync += Assert(~self.mode[1].trans | (self.mode[1].as_value() == mode0.as_value()),
                           "PE row 1 transposed in a mode other than row 0's")

        # ---- cycle 0: operand fetch
        def delayed(value, cycles, name):
            for i in range(cycles):
                reg = Signal.like(value, name=f"{name}_d{i + 1}")
                m.d.sync += reg.eq(value)
                value = reg
            return value

        def pipeline(chunk, suffix):
            """A chunk's control through the pipeline: at the fetch, the adder, the write-back."""
            p = {"k_base": chunk["k_base"]}
            for name in ("mac", "first", "acc_addr", "active", "w", "bank", "last"):
                p[name + "_f"] = delayed(chunk[name], 1, name + suffix)
            for name in ("mac", "first", "acc_addr", "active", "bank", "last"):
                p[name + "_r"] = delayed(p[name + "_f"], MUL_STAGES, name + suffix)
            for name in ("mac", "acc_addr", "bank", "last"):
                p[name + "_w"] = delayed(p[name + "_r"], ADD_STAGES - 1, name + suffix)
            return p

        # each chunk carries its accumulator bank: the next stage (the other bank) may enter
        # while this one's last sums are still in the pipeline
        chunk0, chunk1 = ({"mac": pe.valid, "first": pe.payload.first, "acc_addr": pe.payload.acc_addr,
                           "k_base": pe.payload.k_base, "active": pe.payload.active, "w": pe.payload.w_data,
                           "bank": bank, "last": pe.payload.last} for pe, bank in zip(self.pe, self.bank))
        # PE row 1 takes chunk 1 (rows >= 2: isa/config.py)
        pipes = [pipeline(chunk0, ""), pipeline(chunk1, "_row1")]

        # a transposed stage's chunk control, cycle by cycle after it entered (a transposed
        # PE row 1 takes the same chunks as row 0: no split)
        ctl_layout = StructLayout({"valid": 1, "chunk": trans_chunk_layout(), "bank": 1})
        write_last = trans_line_cycles(lanes)
        ctl = [Signal(ctl_layout, name="t_ctl_d0")]
        m.d.comb += [ctl[0].valid.eq(self.pe[0].valid & mode0.trans), ctl[0].chunk.eq(self.t_chunk),
                     ctl[0].bank.eq(self.bank[0])]
        for t in range(1, write_last + 1):
            ctl.append(Signal(ctl_layout, name=f"t_ctl_d{t}"))
            m.d.sync += ctl[t].eq(ctl[t - 1])
        root_at = PRODUCT_CYCLES + ADD_CYCLES * lane_bits       # the whole chunk's tree value
        direct = Signal(ctl_layout, name="t_direct")             # the chunk at its row value's level
        with m.Switch(mode0.t_level):
            for level in range(lane_bits + 1):
                with m.Case(level):
                    m.d.comb += direct.eq(ctl[PRODUCT_CYCLES + ADD_CYCLES * level])
        scalar_ctl = Signal(ctl_layout, name="t_scalar_ctl")    # a row's last chunk at its value's write
        m.d.comb += scalar_ctl.eq(Mux(mode0.t_fold_adds == 2, ctl[root_at + 3 * ADD_CYCLES],
                                      ctl[root_at + 2 * ADD_CYCLES]))
        d_valid, d_out, d_bank = direct.valid, direct.chunk.out, direct.bank
        s_valid, s_out, s_bank = scalar_ctl.valid, scalar_ctl.chunk.out, scalar_ctl.bank
        s_end = scalar_ctl.chunk.row_end
        at_add, sum_out = ctl[root_at], ctl[root_at + ADD_CYCLES]          # at the set's add, its sum out
        a_set, a_first = at_add.chunk.set, at_add.chunk.first
        c_valid, c_set = sum_out.valid, sum_out.chunk.set
        write_direct = d_valid & ~mode0.t_scalar
        write_scalar = s_valid & s_end & mode0.t_scalar
        t_word = Mux(mode0.t_scalar, s_out, d_out)[lane_bits:]
        t_bank = Mux(mode0.t_scalar, s_bank, d_bank)
        t_lane = Mux(mode0.t_scalar, s_out, d_out)[:lane_bits]

        # the fold unit (hw/fold_unit.py), reading the bank read out
        m.submodules.fold = fold = FoldUnit(cfg, self.acc_depth, self._shared)
        # (a request's plan and bank are the compute unit's; the fold unit takes row and word)
        req = self.fold.payload
        m.d.comb += [fold.n_cols.eq(req.n_cols), fold.n_words.eq(req.n_words),
                     fold.sets.eq(req.sets), fold.sets1.eq(req.sets1),
                     fold.pack_log2.eq(req.pack_log2),
                     fold.req.valid.eq(self.fold.valid), self.fold.ready.eq(fold.req.ready),
                     fold.req.payload.row.eq(req.row), fold.req.payload.word.eq(req.word)]
        wiring.connect(m, fold.out, wiring.flipped(self.sum))

        # a read asked on rd_* takes its buffer's shared read port the cycle after: the
        # address registered, the data read then (as from a synchronous read port)
        rd_in_q, rd_acc_q, rd_bank_q = Signal(), Signal(), Signal()
        rd_row_q, rd_addr_q = Signal.like(self.rd_row), Signal.like(self.rd_addr)
        m.d.sync += [rd_in_q.eq(self.rd_en & ~self.rd_acc), rd_acc_q.eq(self.rd_en & self.rd_acc),
                     rd_row_q.eq(self.rd_row), rd_addr_q.eq(self.rd_addr), rd_bank_q.eq(self.fold.payload.bank)]

        in_reads, acc_reads, fold_reads = [], [], []
        # per row, the PE array's accumulator-line writes into the output buffer, its
        # input-line reads and its slot reads and writes, a cycle each (for
        # tests/unit/test_compute_unit.py and area/power.py's counts)
        self.pe_acc_writes = [Signal(name=f"pe_acc_write{r}") for r in range(rows)]
        self.pe_in_reads = [Signal(name=f"pe_in_read{r}") for r in range(rows)]
        self.pe_slot_reads = [Signal(name=f"pe_slot_read{r}") for r in range(rows)]
        self.pe_slot_writes = [Signal(name=f"pe_slot_write{r}") for r in range(rows)]
        for r in range(rows):
            pipe, mode, lane_row = pipes[row_mode(r)], self.mode[row_mode(r)], lane_rows[row_mode(r)]
            # the input buffer: one read-write port (a 1RW macro), the PE row's operand fetch,
            # a read asked or a write. The control unit's phases fill a bank before its stage
            # reads it, and the softmax unit, reading a bank and writing its outputs back,
            # writes a line between two of its line reads (isa/microarch.py
            # softmax_lines_clear), so a write never meets a read (asserted)
            bank = Memory(shape=unsigned(16 * lanes), depth=self.k_words, init=[], attrs={SINGLE_PORT_ATTR: 1})
            m.submodules[f"in_bank{r}"] = bank
            bank_w, bank_r = bank.write_port(), bank.read_port(domain="comb")
            rd_in = rd_in_q & (rd_row_q == r)
            fetch = self.pe[row_mode(r)].valid
            m.d.sync += Assert(~(rd_in & fetch), f"input row {r}: a read and a fetch on its one port")
            # with `split`, PE row 1 multiplies by input row 0: it gets every write of row 0
            row_hit = (self.in_row == r) | ((self.in_row == 0) & self.split) if r == 1 else (self.in_row == r)
            m.d.sync += Assert(~(self.in_we & row_hit & (rd_in | fetch)),
                               f"input row {r}: a write and a read on its one port")
            m.d.comb += [bank_w.addr.eq(self.in_word), bank_w.data.eq(self.in_data),
                         bank_w.en.eq(self.in_we & row_hit),
                         bank_r.addr.eq(Mux(rd_in, rd_addr_q[:len(bank_r.addr)], pipe["k_base"][lane_bits:]))]
            in_reads.append(bank_r.data)

            # the output buffer: a memory per accumulator bank, so that the bank filling and
            # the bank read out never share a port; one read port (a 1R1W macro): the PE
            # row's accumulator read (the bank it fills), or the fold's first set of a word,
            # its operand or a read asked (the bank read out)
            acc_ports = []
            for b in range(2):
                acc = Memory(shape=unsigned(32 * lanes), depth=self.acc_depth, init=[])
                m.submodules[f"acc_bank{r}_{b}"] = acc
                acc_w, acc_r = acc.write_port(granularity=32), acc.read_port(domain="comb")
                asked = rd_acc_q & (rd_row_q == r) & (rd_bank_q == b)
                first_set = fold.a_en & (fold.a_row == r) & (self.fold.payload.bank == b)
                operand = fold.b_en & (fold.b_row == r) & (self.fold.payload.bank == b)
                m.d.sync += Assert((asked + first_set + operand) <= 1,
                                   f"accumulator row {r} bank {b}: two reads on its read port")
                m.d.comb += acc_r.addr.eq(Mux(asked, rd_addr_q, Mux(first_set, fold.a_addr, fold.b_addr)))
                acc_ports.append((acc_w, acc_r))
            # each reader's data from its bank
            read_out = Signal(32 * lanes, name=f"read_out{r}")
            m.d.comb += read_out.eq(Mux(self.fold.payload.bank, acc_ports[1][1].data, acc_ports[0][1].data))
            asked_data = Mux(rd_bank_q, acc_ports[1][1].data, acc_ports[0][1].data)
            acc_reads.append(asked_data)
            fold_reads.append(read_out)
            # each lane's x: element (first + lane_row) mod LANES of the line, registered
            # the fetched input line, held: a chunk whose line it is reads no line (a tile's
            # words, a row's words and packed groups share one); a write into the bank drops it
            held_line = Signal(16 * lanes, name=f"held_line{r}")
            held_word, held_ok = Signal.like(bank_r.addr, name=f"held_word{r}"), Signal(name=f"held_ok{r}")
            word = pipe["k_base"][lane_bits:][:len(bank_r.addr)]
            hit = held_ok & (held_word == word)
            line = Signal(16 * lanes, name=f"fetched_line{r}")
            m.d.comb += [line.eq(Mux(hit, held_line, bank_r.data)), self.pe_in_reads[r].eq(fetch & ~hit)]
            with m.If(fetch & ~hit):
                m.d.sync += [held_line.eq(bank_r.data), held_word.eq(word), held_ok.eq(1)]
            with m.If(self.in_we & row_hit):
                m.d.sync += held_ok.eq(0)
            m.submodules[f"operand_select{r}"] = select = OperandSelect(lanes)
            m.d.comb += [select.line.eq(line), select.first.eq(pipe["k_base"][:lane_bits])]
            m.d.comb += [select.lane_row[j].eq(lane_row[j]) for j in range(lanes)]
            products, sums, registered = [], [], []
            for j in range(lanes):
                x = select.x[j]
                product = Signal(32, name=f"product_{r}_{j}")
                product_r = Signal(32, name=f"product_r_{r}_{j}")
                add_cell(m, f"mul_{r}_{j}", "ndp_fp16_mul_pipe", self._shared,
                         a=x, b=pipe["w_f"].word_select(j, 16), p=product)
                m.d.sync += product_r.eq(product)
                active = Signal(32, name=f"active_product_{r}_{j}")      # inactive lanes: +0
                m.d.comb += active.eq(Mux(j < pipe["active_r"], product_r, 0))
                products.append(active)
                sums.append(Signal(32, name=f"sum_{r}_{j}"))
                registered.append(Signal(32, name=f"sum_r_{r}_{j}"))
                m.d.sync += registered[j].eq(sums[j])
            # the lane adders: each lane's partial sum (+ its product; a partial sum that
            # started from +0 is never -0, so +0 adds exactly), or, transposed, the nodes of
            # the products' pairwise tree, a level every ADD_CYCLES
            tree = {}
            for level in range(1, lane_bits + 1):
                below = products if level == 1 else [registered[tree_node(level - 1, i, lanes)]
                                                     for i in range(lanes >> (level - 1))]
                for i in range(lanes >> level):
                    tree[tree_node(level, i, lanes)] = (below[2 * i], below[2 * i + 1])
            # the slot registers: the partial sums being added into (isa/pe_array.py), a
            # register file of ACC_SLOTS lines (flip-flops: area/sram.py), read at the adder,
            # written with every chunk's sums (a slot is read again ACC_INTERLEAVE cycles
            # after its read at the earliest: written by then)
            slot_bits = (ACC_SLOTS - 1).bit_length()
            slots = Memory(shape=unsigned(32 * lanes), depth=ACC_SLOTS, init=[])
            m.submodules[f"acc_slots{r}"] = slots
            slot_w, slot_r = slots.write_port(), slots.read_port(domain="comb")
            m.d.comb += [slot_r.addr.eq(pipe["acc_addr_r"][:slot_bits]), slot_w.addr.eq(pipe["acc_addr_w"][:slot_bits]),
                         slot_w.data.eq(Cat(*sums)), slot_w.en.eq(pipe["mac_w"] & ~mode.trans),
                         self.pe_slot_writes[r].eq(slot_w.en),
                         self.pe_slot_reads[r].eq(pipe["mac_r"] & ~pipe["first_r"] & ~mode.trans)]
            for j in range(lanes):
                a = Mux(pipe["first_r"], 0, slot_r.data.word_select(j, 32))
                b = products[j]
                if j in tree:
                    a, b = Mux(mode.trans, tree[j][0], a), Mux(mode.trans, tree[j][1], b)
                add_cell(m, f"add_{r}_{j}", "ndp_fp32_add_pipe", self._shared, a=a, b=b, s=sums[j])

            # transposed, a row of several chunks: its chunks' values into interleaved sets,
            # then ((s0 + s1) + s2)
            set_sum, set_sum_r = Signal(32, name=f"set_sum_{r}"), Signal(32, name=f"set_sum_r_{r}")
            sets = [Signal(32, name=f"set_{r}_{i}") for i in range(ACC_INTERLEAVE)]
            m.d.sync += set_sum_r.eq(set_sum)
            bypass = c_valid & (c_set == a_set)
            kept = Signal(32, name=f"set_kept_{r}")
            with m.Switch(a_set):
                for i in range(ACC_INTERLEAVE):
                    with m.Case(i):
                        m.d.comb += kept.eq(sets[i])
            add_cell(m, f"set_add_{r}", "ndp_fp32_add_pipe", self._shared,
                     a=Mux(a_first, 0, Mux(bypass, set_sum_r, kept)), b=registered[tree_node(lane_bits, 0, lanes)],
                     s=set_sum)
            final = [Mux(c_valid & (c_set == i), set_sum_r, sets[i]) for i in range(ACC_INTERLEAVE)]
            with m.If(c_valid):
                with m.Switch(c_set):
                    for i in range(ACC_INTERLEAVE):
                        with m.Case(i):
                            m.d.sync += sets[i].eq(set_sum_r)
            fold1, fold1_r = Signal(32, name=f"fold1_{r}"), Signal(32, name=f"fold1_r_{r}")
            fold2, fold2_r = Signal(32, name=f"fold2_{r}"), Signal(32, name=f"fold2_r_{r}")
            third = delayed(final[2], ADD_CYCLES, f"set2_{r}")
            add_cell(m, f"fold1_{r}", "ndp_fp32_add_pipe", self._shared, a=final[0], b=final[1], s=fold1)
            add_cell(m, f"fold2_{r}", "ndp_fp32_add_pipe", self._shared, a=fold1_r, b=third, s=fold2)
            m.d.sync += [fold1_r.eq(fold1), fold2_r.eq(fold2)]
            row_value = Mux(mode.t_fold_adds == 2, fold2_r, fold1_r)

            # a row's value into the output buffer: with packed rows the K-lane segments'
            # values (tree level t_level) at their outputs' lanes; else one lane (a row not
            # transposed writes none: the tree's control is row 0's)
            t_write = (write_direct | write_scalar) & mode.trans
            t_data, t_en = [], []
            for j in range(lanes):
                node = Signal(32, name=f"t_node_{r}_{j}")
                enable = Signal(name=f"t_en_{r}_{j}")
                with m.Switch(mode.t_level):
                    for level in range(lane_bits + 1):
                        with m.Case(level):
                            segments = lanes >> level
                            value = products[j] if level == 0 else registered[tree_node(level, j % segments, lanes)]
                            high = (segments - 1).bit_length()      # lanes of one chunk's outputs
                            m.d.comb += [node.eq(value),
                                         enable.eq(Const(j, lane_bits)[high:] == t_lane[high:] if high < lane_bits
                                                   else 1)]
                t_data.append(Mux(mode.t_scalar, row_value, node))
                t_en.append(Mux(mode.t_scalar, t_lane == j, enable) & t_write)
            # the PE array's write-back, a transposed row value, or a word from outside,
            # into its bank (never two in the same cycle)
            # (a chunk writes its sums into the output buffer only as its set's last)
            normal_w = pipe["mac_w"] & ~mode.trans & pipe["last_w"]
            m.d.comb += self.pe_acc_writes[r].eq(normal_w)
            outside = self.acc_we & (self.acc_row == r)
            m.d.sync += Assert((t_write + normal_w + outside) <= 1, f"accumulator row {r}: two writes")
            w_bank, w_addr = Signal(name=f"acc_w_bank{r}"), Signal(range(self.acc_depth), name=f"acc_w_addr{r}")
            w_data, w_en = Signal(32 * lanes, name=f"acc_w_data{r}"), Signal(lanes, name=f"acc_w_en{r}")
            m.d.comb += [w_bank.eq(Mux(t_write, t_bank, Mux(normal_w, pipe["bank_w"], self.fold.payload.bank))),
                         w_addr.eq(Mux(t_write, t_word, Mux(normal_w, pipe["acc_addr_w"], self.acc_word))),
                         w_data.eq(Mux(t_write, Cat(*t_data), Mux(normal_w, Cat(*sums), self.acc_data))),
                         w_en.eq(Mux(t_write, Cat(*t_en), Mux(normal_w | outside, (1 << lanes) - 1, 0)))]
            for b, (acc_w, _) in enumerate(acc_ports):
                m.d.comb += [acc_w.addr.eq(w_addr), acc_w.data.eq(w_data), acc_w.en.eq(Mux(w_bank == b, w_en, 0))]

        with m.Switch(rd_row_q):                       # the row of the data now out
            for r in range(rows):
                with m.Case(r):
                    m.d.comb += [self.rd_in_data.eq(in_reads[r]), self.rd_acc_data.eq(acc_reads[r])]

        # the fold unit's two reads (never in one cycle): a word's first set, an add's operand
        for row, data in [(fold.a_row, fold.a_data), (fold.b_row, fold.b_data)]:
            with m.Switch(row):
                for r in range(rows):
                    with m.Case(r):
                        m.d.comb += data.eq(fold_reads[r])
        return m

"""The softmax special-function unit: one row of FP32 scores in, FP16 probabilities out.

Interface (one row at a time; L = cfg.softmax_lanes, the unit's lanes; a line, the
buffers' word, is cfg.lanes = R x L elements):
- `start` pulse with `length` (elements) and `partial`; `busy` from the next cycle until
  `done`, a one-cycle pulse. `m` and `l` (FP32 bits: the row's max and sum of exp) are
  valid from `done` until the next `start`. Partial, `written` pulses in the cycle the
  last destination line is presented (2W + S + SOFTMAX_E_AT + 1 cycles from `start`):
  the probabilities are all in, the unit goes on to l alone (attention's S V starts
  then, beside it).
- Source: FP32 lines (line a holds elements a*R*L .. , lane j at bits 32j..32j+31), read
  synchronously: `src_data` in cycle t+1 is the line at `src_addr` of cycle t, asked with
  `src_en`. The unit takes a word of L elements a cycle (word w: elements w*L ..
  w*L+L-1): the first word of a line from the line read (`src_en` in the word's cycle),
  the others from a register that keeps the line. The row is read twice (normalized:
  three times), a line every R cycles.
- Destination: FP16 lines, written through `dst_addr`/`dst_data`/`dst_en`. Each word's
  output goes into a line register at its place (the line's first word clears the rest);
  the line is presented when its last word or the row's last word is: lanes past
  `length` in the last line are written as 0. The last write is presented in the `done`
  cycle at the latest.
- Normalized (`partial` = 0): dst = softmax(row). Partial (`partial` = 1, FlashAttention
  style): dst = FP16(exp(x - m)), unnormalized.

The arithmetic is sim/golden.py `softmax_rows`, bit for bit: m = max (total order,
-0 < +0; any NaN gives the canonical NaN); d = x + (-m) (FP32Add); e = exp_approx(d)
(hw/fp_sfu.py); l = the FP32 sum of e in the documented order: per lane j three partial
sums, word w's element into partial (j, w mod 3), then (p0 + p1) + p2 per lane, then a
pairwise lane tree t_j += t_{j+h} for h = L/2 .. 1; r = 1/l (RNE); out = FP16(e * r),
the exact product rounded once (partial: out = FP16(e)).

Every step ends in a register and no path holds more than one FP cell's stage: the max
tree is registered every SOFTMAX_MAX_LEVELS levels of it (each stage's groups of keys
compared all pairs at once, one comparator deep), and x - m and the lanes'
sums use the pipelined FP32 adder (ADD = ADD_CYCLES stages, its sum ADD - 1 cycles after
its operands). A word read in cycle c: its source in c + 1, x - m registered at
c + 1 + ADD, e at E = c + SOFTMAX_E_AT, its FP16 e (partial) presented at E + 1, its sum
into the lane's partial at E + ADD - 1, its FP16 e * r (output pass) presented at
E + MULH. Lanes past the row's end add +0 (a partial sum is never -0, so it stays).

Steps and cycles (cycle 0 is the `start` cycle, W = ceil(length / L) words, lg = log2 L,
S = isa.microarch.softmax_max_stages(L)):
    MAX     W cycles: read word w; each word's lane keys through the max tree (S
            registered stages), its max folded into the row's m the cycle after
    MWAIT   S: the last word's max into m
    EXP     W cycles of reads through the exp pipe (sums, partial: FP16(e) out)
    EDRAIN  SOFTMAX_EXP_DRAIN: the last word's e in its lane's partial
    COMB1, COMB2   ADD each: p0 + p1, then + p2, on the lane adders (p1 left out
            without a second word, p2 without a third: each would add +0)
    TREE    one tree level per ADD cycles on the lane adders, lg levels (a one-word row
            of n: ceil(log2 n), the others' partner lanes all past its end)
    partial: FIN (`done`), so 2W + S + EXP_DRAIN + adds x ADD + 1 cycles from `start` to
            `done`, `adds` the steps not left out (below); at 64 lanes (the paper
            config): 38 for a row of 128 scores, 53 for 512, `written` at 15 and 27.
    RECIP   1 + RECIP_CYCLES: the divider, started in the first cycle
    OUT     W cycles of reads; the exp pipe, then the product (FP32MulToFP16Pipe) to
            the destination register
    ODRAIN  SOFTMAX_OUT_DRAIN, then FIN. Length 0: FIN at once (1 cycle), m = -inf,
            l = +0, nothing written.
`sim/softmax_unit.py` gives these counts; tests/unit/test_softmax.py ties them to this RTL.
"""
from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.descriptor import DIM_BITS as LENGTH_BITS  # a row's length is a dim (in_cols, dev_rows, dev_cols)
from isa.microarch import ADD_CYCLES as ADD
from isa.microarch import SOFTMAX_E_AT as E_AT
from isa.microarch import SOFTMAX_EXP_DRAIN as EXP_DRAIN
from isa.microarch import SOFTMAX_MAX_LEVELS, softmax_max_stages
from isa.microarch import SOFTMAX_MULH_CYCLES as MULH
from isa.microarch import SOFTMAX_OUT_DRAIN as OUT_DRAIN

from .fp import ADD_STAGES
from .fp_cells import add_cell
from .fp_sfu import FP32Recip

assert ADD_STAGES == ADD, "isa/microarch.py's add cycles are the adder's"
assert ADD <= 3, "three partial sums a lane: a lane's next add into a partial comes ADD cycles after its last"
F32_QNAN = 0x7FC00000
KEY_NEG_INF = 0x007FFFFF     # _key(-inf): every key but a NaN's is at least this


def _key(x):
    """FP32 bits -> an unsigned key in the total order (-0 < +0)."""
    return Mux(x[31], ~x, x | 0x80000000)


def _unkey(k):
    return Mux(k[31], k & 0x7FFFFFFF, ~k)


def _group_max(m, keys, name):
    """The largest of `keys` (unsigned) in one compare's depth: every pair compared at once,
    the key that beats all others (ties to the lower index) picked by an AND-OR of one-hot
    terms. The tree of pairwise muxes it replaces spent a compare and a mux a level,
    log2(len(keys)) levels in series (14 gate levels each, the unit's longest path)."""
    if len(keys) == 1:
        return keys[0]
    # above[a][b], a < b: keys[b] > keys[a]
    above = {(a, b): Signal(name=f"kgt{name}_{a}_{b}") for a in range(len(keys)) for b in range(a + 1, len(keys))}
    m.d.comb += [g.eq(keys[b] > keys[a]) for (a, b), g in above.items()]
    picked = []
    for a, key in enumerate(keys):
        wins = Cat(*(above[b, a] for b in range(a)), *(~above[a, b] for b in range(a + 1, len(keys)))).all()
        picked.append(key & wins.replicate(32))
    return _or_tree(picked)


def _or_tree(values):
    """OR of `values` as a balanced tree (a chain would be as deep as the values are many)."""
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0]


class SoftmaxUnit(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        lanes, line = cfg.softmax_lanes, cfg.lanes
        if lanes < 2 or lanes & (lanes - 1) or line % lanes:
            raise ValueError(f"SoftmaxUnit needs a power-of-two lane count >= 2 that divides the line's "
                             f"{line}, got {lanes!r}")
        self._cfg, self._shared, self.lanes, self.line = cfg, shared_cells, lanes, line
        self.words = -(-((1 << LENGTH_BITS) - 1) // lanes)     # words of the longest row
        self.lines = -(-((1 << LENGTH_BITS) - 1) // line)      # ... and lines
        super().__init__({
            "start": In(1), "length": In(LENGTH_BITS), "partial": In(1),
            "busy": Out(1), "done": Out(1),
            "src_en": Out(1), "src_addr": Out(range(self.lines)), "src_data": In(32 * line),
            "dst_addr": Out(range(self.lines)), "dst_data": Out(16 * line), "dst_en": Out(1),
            "m": Out(32), "l": Out(32), "written": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        L, shared = self.lanes, self._shared
        lg = L.bit_length() - 1
        R = self.line // L                       # words a line
        rlog = R.bit_length() - 1
        max_stages = softmax_max_stages(L)

        # ---- row registers
        # the row's last word, and which of its lanes hold an element (a lane's bit j < count);
        # the words' "last" travels with them, so no path compares a word index
        last_word = Signal(range(self.words))
        tail_mask = Signal(L)
        partial = Signal()
        m_key, m_nan = Signal(32), Signal()      # the row's max so far: its key, a NaN seen
        rd = Signal(range(self.words))
        wait = Signal(range(max(EXP_DRAIN, OUT_DRAIN, max_stages, ADD) + 1))
        level = Signal(range(max(lg, 2)))
        m.d.comb += [self.src_addr.eq(rd[rlog:]), self.m.eq(Mux(m_nan, F32_QNAN, _unkey(m_key)))]

        def lane(v, j, width):
            return v.word_select(j, width)

        # a line is read with its first word (`src_en`) and kept in a register: a word is
        # selected the cycle after it is taken, the first from the read, the others from
        # the register
        src = Signal(32 * L)
        issue = Signal()
        m.d.comb += self.src_en.eq(issue & (rd[:rlog] == 0))
        if R > 1:
            rd_place, fresh = Signal(rlog), Signal()
            kept = Signal(32 * self.line)
            m.d.sync += [rd_place.eq(rd[:rlog]), fresh.eq(self.src_en)]
            line = Mux(fresh, self.src_data, kept)
            with m.If(fresh):
                m.d.sync += kept.eq(self.src_data)
            m.d.comb += src.eq(line.word_select(rd_place, 32 * L))
        else:
            m.d.comb += src.eq(self.src_data)

        psum = [[Signal(32, name=f"p{j}_{s}") for s in range(3)] for j in range(L)]
        m.d.comb += self.l.eq(psum[0][0])

        # ---- the exp pipe's words: v[k] (stage k holds a word), w[k] its index, k = 1 ..
        depth = E_AT + MULH
        v = [Signal(name=f"v{k}") for k in range(depth + 1)]
        w = [Signal(range(self.words), name=f"w{k}") for k in range(depth + 1)]
        last = [Signal(name=f"last{k}") for k in range(depth + 1)]    # ... it is the row's last word
        out_pass = Signal()
        acc_set = Signal(2)
        issue_max, issue_exp = Signal(), Signal()
        m.d.comb += issue.eq(issue_max | issue_exp)
        rd_last = Signal()
        m.d.comb += rd_last.eq(rd == last_word)
        m.d.sync += [v[1].eq(issue_exp), w[1].eq(rd), last[1].eq(rd_last)]
        for k in range(2, depth + 1):
            m.d.sync += [v[k].eq(v[k - 1]), w[k].eq(w[k - 1]), last[k].eq(last[k - 1])]

        def lane_ok(is_last, j):
            return ~is_last | tail_mask[j]

        recip = m.submodules.recip = FP32Recip()
        m.d.comb += recip.x.eq(psum[0][0])

        def exp_pass(state, drain_state, drain, after):
            """A pass of the row's words through the exp pipe (EXP: sums; OUT: scaled
            outputs), one word per cycle, then `drain` cycles for the last to leave it, then
            `after()` (the next state)."""
            with m.State(state):
                m.d.comb += issue_exp.eq(1)
                m.d.sync += [rd.eq(rd + 1), wait.eq(drain - 1)]
                with m.If(rd_last):
                    m.next = drain_state
            with m.State(drain_state):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += wait.eq(ADD - 1)
                    after()

        # the lane adders: an add issued in the first cycle of an adder step (wait == ADD - 1)
        adder_issue = Signal()
        first_level = Signal(range(lg + 1))      # the tree's first level with a partner lane in the row

        def tree_or_after():
            m.d.sync += level.eq(first_level)
            with m.If(first_level != lg):
                m.next = "TREE"
            with m.Elif(partial):
                m.next = "FIN"
            with m.Else():
                m.next = "RECIP"
        # the row's lane mask and first tree level, worked out the cycle after `start` from
        # its registered length (the length comes from the control unit, a long path of its
        # own): the mask is first wanted by the first word's keys, a cycle after its read
        length, primed = Signal(LENGTH_BITS), Signal()
        with m.If(primed):
            tail = Signal(range(L + 1))
            m.d.comb += tail.eq(Mux(length[:lg] == 0, L, length[:lg]))
            m.d.sync += [tail_mask.eq(Cat(j < tail for j in range(L))),
                         first_level.eq(Mux(length > L, 0,
                                            sum((length <= (L >> (lvl + 1))).as_unsigned() for lvl in range(lg))))]
        with m.FSM() as fsm:
            m.d.sync += primed.eq(fsm.ongoing("IDLE") & self.start)
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [last_word.eq((self.length - 1)[lg:]), length.eq(self.length),
                                 partial.eq(self.partial), rd.eq(0), out_pass.eq(0),
                                 m_key.eq(KEY_NEG_INF), m_nan.eq(0)]
                    m.d.sync += [p.eq(0) for ps in psum for p in ps]
                    with m.If(self.length == 0):
                        m.next = "FIN"
                    with m.Else():
                        m.next = "MAX"
            with m.State("MAX"):
                m.d.comb += issue_max.eq(1)
                m.d.sync += [rd.eq(rd + 1), wait.eq(max_stages - 1)]
                with m.If(rd_last):
                    m.next = "MWAIT"
            with m.State("MWAIT"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [rd.eq(0), acc_set.eq(0)]
                    m.next = "EXP"

            def combine():
                # adds of +0 are left out (x + 0 = x: a partial sum is never -0): p1 without
                # a second word, p2 without a third; the tree's levels whose partner lanes all
                # lie past a one-word row's end
                with m.If(last_word >= 1):
                    m.next = "COMB1"
                with m.Else():
                    tree_or_after()
            exp_pass("EXP", "EDRAIN", EXP_DRAIN, combine)

            def adder_step(state, after, first=False):
                """One add on every lane adder: issued in the state's first cycle, its sum
                written in its last (ADD cycles)."""
                with m.State(state):
                    m.d.comb += adder_issue.eq(wait == ADD - 1)
                    m.d.sync += wait.eq(wait - 1)
                    with m.If(wait == 0):
                        m.d.sync += wait.eq(ADD - 1)
                        after()
            def comb1_after():
                with m.If(last_word >= 2):
                    m.next = "COMB2"
                with m.Else():
                    tree_or_after()
            adder_step("COMB1", comb1_after)
            adder_step("COMB2", tree_or_after)

            def tree_after():
                m.d.sync += level.eq(level + 1)
                with m.If((level == lg - 1) & partial):
                    m.next = "FIN"
                with m.Elif(level == lg - 1):
                    m.next = "RECIP"
            adder_step("TREE", tree_after)
            with m.State("RECIP"):
                m.d.comb += recip.start.eq(1)
                m.next = "RECIP_WAIT"
            with m.State("RECIP_WAIT"):
                with m.If(recip.done):
                    m.d.sync += [rd.eq(0), out_pass.eq(1)]
                    m.next = "OUT"
            exp_pass("OUT", "ODRAIN", OUT_DRAIN, lambda: setattr(m, "next", "FIN"))
            with m.State("FIN"):
                m.next = "IDLE"
        m.d.comb += [self.busy.eq(~fsm.ongoing("IDLE")), self.done.eq(fsm.ongoing("FIN"))]

        # ---- the max: each word's lane keys (lanes past the end as 0, below every other
        # key; a NaN raises the flag) through a tree registered every
        # SOFTMAX_MAX_LEVELS levels, then folded into the row's m
        mx_v, mx_last, keys_v = Signal(), Signal(), Signal()
        m.d.sync += [mx_v.eq(issue_max), mx_last.eq(rd_last), keys_v.eq(mx_v)]
        keys, nans = [], []
        for j in range(L):
            x = lane(src, j, 32)
            is_nan = (x[23:31] == 0xFF) & x[:23].any()
            ok = lane_ok(mx_last, j)
            key, nan = Signal(32, name=f"xkey{j}"), Signal(name=f"xnan{j}")
            # a NaN's key is left in (above +inf or below -inf): with the flag raised, m is
            # the canonical NaN whatever the keys say, and the key path skips the NaN test.
            # The keys registered: the word comes from the control unit's choice and widening
            m.d.sync += [key.eq(Mux(ok, _key(x), 0)), nan.eq(ok & is_nan)]
            keys.append(key)
            nans.append(nan)
        tree_v, stage = keys_v, 1
        while len(keys) > 1:
            # one stage: groups of up to 2^SOFTMAX_MAX_LEVELS keys, each group's max at once
            # (`_group_max`), registered
            group = min(1 << SOFTMAX_MAX_LEVELS, len(keys))
            h = len(keys) // group
            stage += 1
            rk = [Signal(32, name=f"kreg{stage}_{j}") for j in range(h)]
            rn = [Signal(name=f"nreg{stage}_{j}") for j in range(h)]
            rv = Signal(name=f"kreg{stage}_valid")
            for j in range(h):
                members = range(j, len(keys), h)
                m.d.sync += [rk[j].eq(_group_max(m, [keys[i] for i in members], f"{stage}_{j}")),
                             rn[j].eq(Cat(*(nans[i] for i in members)).any())]
            m.d.sync += rv.eq(tree_v)
            keys, nans, tree_v = rk, rn, rv
        assert stage == max_stages, (stage, max_stages)
        with m.If(tree_v):
            m.d.sync += m_nan.eq(m_nan | nans[0])
            with m.If(keys[0] > m_key):
                m.d.sync += m_key.eq(keys[0])

        # ---- the exp pipeline, per lane
        neg_m = self.m ^ 0x80000000
        dst_data = Signal(16 * L)
        dst_last = Signal()
        accumulate = v[E_AT] & ~out_pass
        with m.If(accumulate):
            m.d.sync += acc_set.eq(Mux(acc_set == 2, 0, acc_set + 1))
        # a word's output (partial: its e in FP16 as it is summed; normalized: e / l) into
        # its place in the line register, the line presented with its last word or the row's
        emit, emit_word, emit_last = Signal(), Signal(range(self.words)), Signal()
        m.d.comb += [emit.eq(Mux(out_pass, v[E_AT + MULH - 1], accumulate & partial)),
                     emit_word.eq(Mux(out_pass, w[E_AT + MULH - 1], w[E_AT])),
                     emit_last.eq(Mux(out_pass, last[E_AT + MULH - 1], last[E_AT]))]
        place = emit_word[:rlog]
        m.d.sync += [self.dst_en.eq(emit & ((place == R - 1) | emit_last)), self.dst_addr.eq(emit_word[rlog:]),
                     dst_last.eq(emit_last)]
        with m.If(emit):
            for p in range(R):
                with m.If(place == p):
                    m.d.sync += self.dst_data.word_select(p, 16 * L).eq(dst_data)
                if p:
                    with m.Elif(place == 0):
                        m.d.sync += self.dst_data.word_select(p, 16 * L).eq(0)
        # partial: the row's last FP16 e is presented now
        m.d.comb += self.written.eq(self.dst_en & dst_last & partial & ~out_pass)

        # the lane adders' writes: ADD - 1 cycles after the add, into the partial it names
        wr_v = [Signal(name=f"wr_v{k}") for k in range(ADD)]
        wr_set = [Signal(2, name=f"wr_set{k}") for k in range(ADD)]
        m.d.comb += [wr_v[0].eq(accumulate | adder_issue), wr_set[0].eq(Mux(accumulate, acc_set, 0))]
        for k in range(1, ADD):
            m.d.sync += [wr_v[k].eq(wr_v[k - 1]), wr_set[k].eq(wr_set[k - 1])]

        for j in range(L):
            d, d_reg = Signal(32, name=f"d{j}"), Signal(32, name=f"d_reg{j}")
            add_cell(m, f"sub_{j}", "ndp_fp32_add_pipe", shared, a=lane(src, j, 32), b=neg_m, s=d)
            m.d.sync += d_reg.eq(d)

            e, e_reg = Signal(32, name=f"e{j}"), Signal(32, name=f"e_reg{j}")
            add_cell(m, f"exp_{j}", "ndp_exp_approx_pipe", shared, d=d_reg, e=e)
            m.d.sync += e_reg.eq(e)

            half = Signal(16, name=f"half{j}")
            add_cell(m, f"cvt_{j}", "ndp_fp32_to_fp16", shared, a=e_reg, h=half)
            product = Signal(16, name=f"product{j}")
            add_cell(m, f"mul_{j}", "ndp_fp32_mul_to_fp16_pipe", shared, a=e_reg, b=recip.r, h=product)
            out_last = Mux(out_pass, last[E_AT + MULH - 1], last[E_AT])
            m.d.comb += lane(dst_data, j, 16).eq(Mux(lane_ok(out_last, j), Mux(out_pass, product, half), 0))

            # the lane adder: accumulate (lanes past the end add +0), combine the three
            # partials, one tree level (lanes j >= h add +0 to their own)
            acc_a, acc_b, acc_s = (Signal(32, name=f"acc_{n}{j}") for n in "abs")
            add_cell(m, f"acc_{j}", "ndp_fp32_add_pipe", shared, a=acc_a, b=acc_b, s=acc_s)
            with m.If(accumulate):
                m.d.comb += [acc_a.eq(Array(psum[j])[acc_set]), acc_b.eq(Mux(lane_ok(last[E_AT], j), e_reg, 0))]
            with m.Elif(fsm.ongoing("COMB1")):
                m.d.comb += [acc_a.eq(psum[j][0]), acc_b.eq(psum[j][1])]
            with m.Elif(fsm.ongoing("COMB2")):
                m.d.comb += [acc_a.eq(psum[j][0]), acc_b.eq(psum[j][2])]
            with m.Elif(fsm.ongoing("TREE")):
                m.d.comb += acc_a.eq(psum[j][0])
                with m.Switch(level):
                    for lvl in range(lg):
                        h = L >> (lvl + 1)
                        if j < h:
                            with m.Case(lvl):
                                m.d.comb += acc_b.eq(psum[j + h][0])
            with m.If(wr_v[ADD - 1]):
                with m.Switch(wr_set[ADD - 1]):
                    for s in range(3):
                        with m.Case(s):
                            m.d.sync += psum[j][s].eq(acc_s)
        return m

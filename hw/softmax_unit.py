"""The softmax special-function unit: one row of FP32 scores in, FP16 probabilities out.

Interface (one row at a time; L = cfg.lanes):
- `start` pulse with `length` (elements) and `partial`; `busy` from the next cycle until
  `done`, a one-cycle pulse. `m` and `l` (FP32 bits: the row's max and sum of exp) are
  valid from `done` until the next `start`.
- Source: FP32 words of L lanes (word w holds elements w*L .. w*L+L-1, lane j at bits
  32j..32j+31), read synchronously: `src_data` in cycle t+1 is the word at `src_addr` of
  cycle t. The row is read twice (normalized: three times).
- Destination: FP16 words of L lanes, written through `dst_addr`/`dst_data`/`dst_en`;
  lanes past `length` in the last word are written as 0. The last write is presented in
  the `done` cycle at the latest.
- Normalized (`partial` = 0): dst = softmax(row). Partial (`partial` = 1, FlashAttention
  style): dst = FP16(exp(x - m)), unnormalized.

The arithmetic is sim/golden.py `softmax_rows`, bit for bit: m = max (total order,
-0 < +0; any NaN gives the canonical NaN); d = x + (-m) (FP32Add); e = exp_approx(d)
(hw/fp_sfu.py); l = the FP32 sum of e in the documented order: per lane j three partial
sums, word w's element into partial (j, w mod 3), then (p0 + p1) + p2 per lane, then a
pairwise lane tree t_j += t_{j+h} for h = L/2 .. 1; r = 1/l (RNE); out = FP16(e * r),
the exact product rounded once (partial: out = FP16(e)).

Steps and cycles (cycle 0 is the `start` cycle, W = ceil(length / L), lg = log2 L):
    MAX     W cycles: read word w, fold it into the per-lane max keys and NaN flags
    MDRAIN  1: the last word folds in
    MRED    1: m = reduction over the lanes (a comparator tree)
    EXP     W cycles of reads; the pipeline: d = x - m (register), exp stage 1 (register),
            exp stage 2 (register), then add into the lane's partial (and, partial mode,
            FP16(e) to the destination register)
    EDRAIN  4: the pipeline empties
    COMB1, COMB2: p0 + p1, then + p2, on the lane adders
    TREE    lg cycles: one tree level per cycle on the lane adders
    partial: FIN (`done`), so 2W + lg + 9 cycles from `start` to `done`.
    RECIP   1 + RECIP_CYCLES: the divider, started in the first cycle
    OUT     W cycles of reads; pipeline as EXP, then the product (FP32MulToFP16Pipe,
            2 stages) to the destination register
    ODRAIN  5, then FIN: 3W + lg + 41 cycles. Length 0: FIN at once (1 cycle), m = -inf,
            l = +0, nothing written.
`sim/softmax_unit.py` gives these counts; tests/unit/test_softmax.py ties them to this RTL.
No path holds more than one FP unit: every step above ends in a register.
"""
from amaranth import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.microarch import SOFTMAX_EXP_DRAIN as EXP_DRAIN, SOFTMAX_OUT_DRAIN as OUT_DRAIN
from .fp_cells import add_cell
from .fp_sfu import FP32Recip

from isa.descriptor import DIM_BITS as LENGTH_BITS     # a row's length is a dim (in_cols, dev_rows, dev_cols)
F32_QNAN = 0x7FC00000
F32_NEG_INF = 0xFF800000


def _key(x):
    """FP32 bits -> an unsigned key in the total order (-0 < +0)."""
    return Mux(x[31], ~x, x | 0x80000000)


def _unkey(k):
    return Mux(k[31], k & 0x7FFFFFFF, ~k)


class SoftmaxUnit(wiring.Component):
    def __init__(self, cfg, shared_cells=True):
        lanes = cfg.lanes
        if lanes < 2 or lanes & (lanes - 1):
            raise ValueError(f"SoftmaxUnit needs a power-of-two lane count >= 2, got {lanes!r}")
        self._cfg, self._shared, self.lanes = cfg, shared_cells, lanes
        self.words = -(-((1 << LENGTH_BITS) - 1) // lanes)     # words of the longest row
        super().__init__({
            "start": In(1), "length": In(LENGTH_BITS), "partial": In(1),
            "busy": Out(1), "done": Out(1),
            "src_addr": Out(range(self.words)), "src_data": In(32 * lanes),
            "dst_addr": Out(range(self.words)), "dst_data": Out(16 * lanes), "dst_en": Out(1),
            "m": Out(32), "l": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        L, shared = self.lanes, self._shared
        lg = L.bit_length() - 1

        # ---- row registers
        n_words = Signal(range(self.words + 1))
        last_count = Signal(range(L + 1))        # valid lanes of the last word, 1..L
        partial = Signal()
        m_reg = Signal(32)
        rd = Signal(range(self.words))
        wait = Signal(range(8))
        level = Signal(range(max(lg, 2)))
        m.d.comb += [self.src_addr.eq(rd), self.m.eq(m_reg)]

        def lane_ok(w, j):
            return (w != n_words - 1) | (j < last_count)

        def lane(v, j, width):
            return v.word_select(j, width)

        # ---- per-lane state
        keys = [Signal(32, name=f"key{j}") for j in range(L)]
        nans = [Signal(name=f"nan{j}") for j in range(L)]
        psum = [[Signal(32, name=f"p{j}_{s}") for s in range(3)] for j in range(L)]
        m.d.comb += self.l.eq(psum[0][0])

        # ---- pipeline valid bits and word indices
        mx_v, mx_w = Signal(), Signal(range(self.words))
        v = [Signal(name=f"v{k}") for k in range(6)]            # v[1]..v[5]: stage k holds a word
        w = [Signal(range(self.words), name=f"w{k}") for k in range(6)]
        out_pass = Signal()
        acc_set = Signal(2)
        issue_max, issue_exp = Signal(), Signal()
        m.d.sync += [mx_v.eq(issue_max), mx_w.eq(rd), v[1].eq(issue_exp), w[1].eq(rd)]
        for k in range(2, 6):
            m.d.sync += [v[k].eq(v[k - 1]), w[k].eq(w[k - 1])]

        recip = m.submodules.recip = FP32Recip()
        m.d.comb += recip.x.eq(psum[0][0])

        def exp_pass(state, drain_state, drain, after):
            """A pass of the row's words through the exp pipe (EXP: sums; OUT: scaled
            outputs), one word per cycle, then `drain` cycles for the last to leave it."""
            with m.State(state):
                m.d.comb += issue_exp.eq(1)
                m.d.sync += [rd.eq(rd + 1), wait.eq(drain - 1)]
                with m.If(rd == n_words - 1):
                    m.next = drain_state
            with m.State(drain_state):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.next = after

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    count = Signal(LENGTH_BITS + 1)
                    m.d.comb += count.eq(self.length + (L - 1))
                    m.d.sync += [n_words.eq(count[lg:]),
                                 last_count.eq(Mux(self.length[:lg] == 0, L, self.length[:lg])),
                                 partial.eq(self.partial), rd.eq(0), out_pass.eq(0)]
                    m.d.sync += [s.eq(0) for s in keys + nans + [p for ps in psum for p in ps]]
                    with m.If(self.length == 0):
                        m.d.sync += m_reg.eq(F32_NEG_INF)
                        m.next = "FIN"
                    with m.Else():
                        m.next = "MAX"
            with m.State("MAX"):
                m.d.comb += issue_max.eq(1)
                m.d.sync += rd.eq(rd + 1)
                with m.If(rd == n_words - 1):
                    m.next = "MDRAIN"
            with m.State("MDRAIN"):
                m.next = "MRED"
            with m.State("MRED"):
                m.d.sync += [rd.eq(0), acc_set.eq(0)]
                m.next = "EXP"
            exp_pass("EXP", "EDRAIN", EXP_DRAIN, "COMB1")
            with m.State("COMB1"):
                m.next = "COMB2"
            with m.State("COMB2"):
                m.d.sync += level.eq(0)
                m.next = "TREE"
            with m.State("TREE"):
                m.d.sync += level.eq(level + 1)
                with m.If((level == lg - 1) & partial):
                    m.next = "FIN"
                with m.Elif(level == lg - 1):
                    m.next = "RECIP"
            with m.State("RECIP"):
                m.d.comb += recip.start.eq(1)
                m.next = "RECIP_WAIT"
            with m.State("RECIP_WAIT"):
                with m.If(recip.done):
                    m.d.sync += [rd.eq(0), out_pass.eq(1)]
                    m.next = "OUT"
            exp_pass("OUT", "ODRAIN", OUT_DRAIN, "FIN")
            with m.State("FIN"):
                m.next = "IDLE"
        m.d.comb += [self.busy.eq(~fsm.ongoing("IDLE")), self.done.eq(fsm.ongoing("FIN"))]

        # ---- MAX: fold the word into the lane keys (NaNs only raise the flag)
        for j in range(L):
            x = lane(self.src_data, j, 32)
            is_nan = (x[23:31] == 0xFF) & x[:23].any()
            key = Signal(32, name=f"xkey{j}")
            m.d.comb += key.eq(_key(x))
            with m.If(mx_v & lane_ok(mx_w, j)):
                with m.If(is_nan):
                    m.d.sync += nans[j].eq(1)
                with m.Elif(key > keys[j]):
                    m.d.sync += keys[j].eq(key)

        # ---- MRED: m over the lanes
        ks, ns = list(keys), list(nans)
        while len(ks) > 1:
            h = len(ks) // 2
            nk = [Signal(32, name=f"kred{h}_{j}") for j in range(h)]
            m.d.comb += [nk[j].eq(Mux(ks[j + h] > ks[j], ks[j + h], ks[j])) for j in range(h)]
            ks, ns = nk, [ns[j] | ns[j + h] for j in range(h)]
        with m.If(fsm.ongoing("MRED")):
            m.d.sync += m_reg.eq(Mux(ns[0], F32_QNAN, _unkey(ks[0])))

        # ---- the exp pipeline, per lane
        neg_m = m_reg ^ 0x80000000
        dst_data = Signal(16 * L)
        m.d.sync += [self.dst_en.eq(0), self.dst_addr.eq(w[4])]
        with m.If(v[4] & ~out_pass):
            m.d.sync += acc_set.eq(Mux(acc_set == 2, 0, acc_set + 1))
            with m.If(partial):
                m.d.sync += self.dst_en.eq(1)
        with m.If(v[5] & out_pass):
            m.d.sync += [self.dst_en.eq(1), self.dst_addr.eq(w[5])]
        m.d.sync += self.dst_data.eq(dst_data)

        for j in range(L):
            d = Signal(32, name=f"d{j}")
            d_reg = Signal(32, name=f"d_reg{j}")
            add_cell(m, f"sub_{j}", "ndp_fp32_add", shared, a=lane(self.src_data, j, 32), b=neg_m, s=d)
            m.d.sync += d_reg.eq(d)

            e, e_reg = Signal(32, name=f"e{j}"), Signal(32, name=f"e_reg{j}")
            add_cell(m, f"exp_{j}", "ndp_exp_approx_pipe", shared, d=d_reg, e=e)
            m.d.sync += e_reg.eq(e)

            half = Signal(16, name=f"half{j}")
            add_cell(m, f"cvt_{j}", "ndp_fp32_to_fp16", shared, a=e_reg, h=half)
            product = Signal(16, name=f"product{j}")
            add_cell(m, f"mul_{j}", "ndp_fp32_mul_to_fp16_pipe", shared, a=e_reg, b=recip.r, h=product)
            stage_w = Mux(out_pass, w[5], w[4])
            m.d.comb += lane(dst_data, j, 16).eq(
                Mux(lane_ok(stage_w, j), Mux(out_pass, product, half), 0))

            # the lane adder: accumulate, combine the three partials, one tree level
            acc_a, acc_b, acc_s = (Signal(32, name=f"acc_{n}{j}") for n in "abs")
            add_cell(m, f"acc_{j}", "ndp_fp32_add", shared, a=acc_a, b=acc_b, s=acc_s)
            with m.If(v[4] & ~out_pass):
                m.d.comb += [acc_a.eq(Array(psum[j])[acc_set]), acc_b.eq(e_reg)]
                with m.If(lane_ok(w[4], j)):
                    with m.Switch(acc_set):
                        for s in range(3):
                            with m.Case(s):
                                m.d.sync += psum[j][s].eq(acc_s)
            with m.Elif(fsm.ongoing("COMB1")):
                m.d.comb += [acc_a.eq(psum[j][0]), acc_b.eq(psum[j][1])]
                m.d.sync += psum[j][0].eq(acc_s)
            with m.Elif(fsm.ongoing("COMB2")):
                m.d.comb += [acc_a.eq(psum[j][0]), acc_b.eq(psum[j][2])]
                m.d.sync += psum[j][0].eq(acc_s)
            with m.Elif(fsm.ongoing("TREE")):
                m.d.comb += acc_a.eq(psum[j][0])
                with m.Switch(level):
                    for lvl in range(lg):
                        h = L >> (lvl + 1)
                        if j < h:
                            with m.Case(lvl):
                                m.d.comb += acc_b.eq(psum[j + h][0])
                                m.d.sync += psum[j][0].eq(acc_s)
        return m

"""Bit-exact IEEE 754 floating-point datapath blocks.

All rounding is round-to-nearest, ties-to-even; every NaN output is the
canonical quiet NaN (0x7FC00000 for binary32, 0x7E00 for binary16).

`FP16MulToFP32`, `FP32Add`, `FP32ToFP16` and `FP16ToFP32` are purely combinational.
`FP16MulToFP32Pipe` and `FP32AddPipe` compute the same functions in
`MUL_STAGES` and `ADD_STAGES` logic stages, with a register in the `sync`
domain between neighbouring stages and a combinational output from the last
stage: the result at cycle t + STAGES - 1 is f(inputs at cycle t), and the
consumer registers it. They have no enable; the pipeline always advances.

Each unit's logic is written once (`_mul_logic`, `_add_logic`) with a `cut`
callback at every stage boundary: `_comb_cut` passes the values through,
`_sync_cut` registers them. `python -m hw.depth` measures the gate levels.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FP16MulToFP32", "FP16MulToFP32Pipe", "FP32Add", "FP32AddPipe", "FP32ToFP16",
           "FP16ToFP32", "MUL_STAGES", "ADD_STAGES"]

# Logic stages of the pipelined units; the latency is STAGES - 1 cycles.
MUL_STAGES = 2
ADD_STAGES = 3

F32_QNAN = 0x7FC00000
F16_QNAN = 0x7E00


def _lzc(m, x, name):
    """Leading-zero count of ``x`` as a log-depth tree; gives len(x) for x == 0."""
    width = len(x)
    n = 1 << max(1, (width - 1).bit_length())
    # Pad at the LSB end with ones so an all-zero input counts exactly `width`.
    v = Signal(n, name=f"{name}_in")
    m.d.comb += v.eq(Cat(Const((1 << (n - width)) - 1, n - width), x) if n > width else x)

    def tree(v, path):
        if len(v) == 2:
            return v.any(), ~v[1]
        half = len(v) // 2
        vl, cl = tree(v[:half], path + "l")
        vh, ch = tree(v[half:], path + "h")
        # Each node goes into signals: the expressions are used twice, and
        # inlining them would blow the netlist up exponentially.
        valid = Signal(name=f"{name}_v{path}")
        count = Signal(len(cl) + 1, name=f"{name}_c{path}")
        # If the upper half holds a one its count wins, else half + lower count.
        m.d.comb += [
            valid.eq(vh | vl),
            count.eq(Mux(vh, Cat(ch, Const(0, 1)), Cat(cl, Const(1, 1)))),
        ]
        return valid, count

    return tree(v, "")[1]


def _shr_sticky(m, x, amount, name):
    """Logarithmic right shift of ``x`` by ``amount``, OR-ing every bit shifted
    out into a sticky flag (needed for correct rounding). Returns (value, sticky)."""
    cur, sticky = x, Const(0, 1)
    for i in range(len(amount)):
        k = 1 << i
        nxt = Signal(len(x), name=f"{name}_s{i}")
        lost = cur[:k].any() if k < len(x) else cur.any()
        m.d.comb += nxt.eq(Mux(amount[i], cur[k:] if k < len(x) else 0, cur))
        sticky = sticky | (amount[i] & lost)
        cur = nxt
    st = Signal(name=f"{name}_sticky")
    m.d.comb += st.eq(sticky)
    return cur, st


def _round_to_fp16(m, shifted, sticky, lsb, exp, name):
    """FP16 magnitude bits, rounded to nearest even: the 10 kept fraction bits start at
    bit `lsb` of `shifted` (guard bit below them; `sticky` and the lower bits the rest),
    packed under the biased exponent `exp` (0 below the normal range). The rounding
    carry reaches the exponent: subnormal -> normal, largest finite -> infinity."""
    round_up = shifted[lsb - 1] & (sticky | shifted[:lsb - 1].any() | shifted[lsb])
    packed = Signal(15, name=f"{name}_packed")
    m.d.comb += packed.eq(Cat(shifted[lsb:lsb + 10], exp) + round_up)
    return packed


def _comb_cut(**values):
    """Stage boundary of a combinational unit: the values pass straight through."""
    return tuple(values.values())


def _sync_cut(m, prefix):
    """Stage boundaries of a pipelined unit: each call registers its values in
    the `sync` domain, as `{prefix}{stage}_{name}`."""
    def cut(**values):
        cut.boundaries += 1
        regs = []
        for name, value in values.items():
            value = Value.cast(value)
            reg = Signal(value.shape(), name=f"{prefix}{cut.boundaries}_{name}")
            m.d.sync += reg.eq(value)
            regs.append(reg)
        return tuple(regs)

    cut.boundaries = 0
    return cut


def _mul_logic(m, a, b, cut):
    """The FP16 x FP16 -> FP32 product of ``a`` and ``b`` in two stages, split by
    one call of ``cut``; returns the result (combinational from stage 2)."""
    # ---- stage 1: unpack, 11x11 significand product, exponent sum, special cases
    def unpack(x, name):
        e, f = x[10:15], x[:10]
        hidden, inf, nan, zero = (Signal(name=f"{name}_{n}")
                                  for n in ("hidden", "inf", "nan", "zero"))
        m.d.comb += [
            hidden.eq(e.any()),
            inf.eq((e == 0x1F) & ~f.any()),
            nan.eq((e == 0x1F) & f.any()),
            zero.eq(~x[:15].any()),
        ]
        # Subnormals: no hidden bit, effective exponent 1 (0.f x 2^-14).
        return x[15], Cat(f, hidden), Mux(hidden, e, 1), inf, nan, zero

    sa, siga, expa, a_inf, a_nan, a_zero = unpack(a, "a")
    sb, sigb, expb, b_inf, b_nan, b_zero = unpack(b, "b")

    prod = Signal(22)
    m.d.comb += prod.eq(siga * sigb)
    # value = prod * 2^(expa+expb-50); leading one at 21-lz
    # => biased binary32 exponent = expa+expb-29-lz+127, always in 79..158.
    exp_base = Signal(8)
    m.d.comb += exp_base.eq(expa + expb + 98)
    nan = Signal()
    inf = Signal()
    zero = Signal()
    m.d.comb += [
        nan.eq(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)),
        inf.eq(a_inf | b_inf),
        zero.eq(a_zero | b_zero),
    ]

    prod, exp_base, sign, nan, inf, zero = cut(
        prod=prod, exp_base=exp_base, sign=sa ^ sb, nan=nan, inf=inf, zero=zero)

    # ---- stage 2: normalise the 22-bit product so its leading one sits at bit 21
    lz = Signal(5)
    norm = Signal(22)
    m.d.comb += [
        lz.eq(_lzc(m, prod, "lzc")),
        norm.eq(prod << lz),
    ]
    exp = Signal(8)
    m.d.comb += exp.eq(exp_base - lz)

    p = Signal(32)
    with m.If(nan):
        m.d.comb += p.eq(F32_QNAN)
    with m.Elif(inf):
        m.d.comb += p.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Elif(zero):
        m.d.comb += p.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += p.eq(Cat(Const(0, 2), norm[:21], exp, sign))
    return p


def _add_logic(m, a, b, cut):
    """The FP32 sum of ``a`` and ``b`` in three stages, split by two calls of
    ``cut``; returns the result (combinational from stage 3)."""
    # ---- stage 1: classify, order by magnitude, align the smaller operand
    def classify(x, name):
        inf, nan = Signal(name=f"{name}_inf"), Signal(name=f"{name}_nan")
        m.d.comb += [
            inf.eq((x[23:31] == 0xFF) & ~x[:23].any()),
            nan.eq((x[23:31] == 0xFF) & x[:23].any()),
        ]
        return x[31], inf, nan

    sa, a_inf, a_nan = classify(a, "a")
    sb, b_inf, b_nan = classify(b, "b")

    # Subnormals have no hidden bit and use effective exponent 1.
    def unpack(x, name):
        hidden, exp = Signal(name=f"{name}_hidden"), Signal(8, name=f"{name}_exp")
        m.d.comb += [
            hidden.eq(x[23:31].any()),
            exp.eq(Mux(hidden, x[23:31], 1)),
        ]
        return Cat(x[:23], hidden), exp

    sig_a, exp_a = unpack(a, "a")
    sig_b, exp_b = unpack(b, "b")

    # Order operands by magnitude (IEEE encodings sort like integers) so the
    # subtraction below never goes negative and the result sign is the big one's.
    swap = Signal()
    m.d.comb += swap.eq(b[:31] > a[:31])
    sig_big = Signal(24)
    sig_small = Signal(24)
    e_big = Signal(8)
    m.d.comb += [
        sig_big.eq(Mux(swap, sig_b, sig_a)),
        sig_small.eq(Mux(swap, sig_a, sig_b)),
        e_big.eq(Mux(swap, exp_b, exp_a)),
    ]
    subtract = Signal()
    m.d.comb += subtract.eq(sa ^ sb)

    # Align: 24-bit significand + guard/round/sticky (27 bits). Shifts >= 27
    # push everything into sticky, so clamp the distance to 5 bits. Both
    # exponent differences are formed alongside the magnitude comparison (not
    # after it) to keep the stage shallow; `swap` then picks the non-negative one.
    def distance(e_hi, e_lo, name):
        diff, dist = Signal(8, name=f"{name}_diff"), Signal(5, name=f"{name}_dist")
        m.d.comb += [
            diff.eq(e_hi - e_lo),
            dist.eq(Mux(diff[5:].any(), 31, diff[:5])),
        ]
        return dist

    dist = Signal(5)
    m.d.comb += dist.eq(Mux(swap, distance(exp_b, exp_a, "ba"), distance(exp_a, exp_b, "ab")))
    aligned, sticky = _shr_sticky(m, Cat(Const(0, 3), sig_small), dist, "align")
    # Jam the sticky into the LSB: correct for both add and subtract because
    # the normaliser shifts left by at most one place whenever sticky can be set.
    small_ext = Signal(27)
    m.d.comb += small_ext.eq(aligned | sticky)

    # Special cases, settled here so only their verdict travels down the pipe.
    nan = Signal()
    inf = Signal()
    m.d.comb += [
        nan.eq(a_nan | b_nan | (a_inf & b_inf & subtract)),
        inf.eq(a_inf | b_inf),
    ]

    sig_big, small_ext, subtract, e_big, sign_big, both_neg, nan, inf, inf_sign = cut(
        sig_big=sig_big, small_ext=small_ext, subtract=subtract, e_big=e_big,
        sign_big=Mux(swap, sb, sa), both_neg=sa & sb, nan=nan, inf=inf,
        inf_sign=Mux(a_inf, sa, sb))

    # ---- stage 2: add / subtract the significands, count leading zeros
    big_ext = Cat(Const(0, 3), sig_big)
    raw = Signal(28)
    m.d.comb += raw.eq(Mux(subtract, big_ext - small_ext, big_ext + small_ext))

    # Normalising shifts left by the leading-zero count, but never below
    # exponent 1: a marker bit at position 27-e_big stops the count there
    # (gradual underflow).
    marker = Cat(*[e_big == 27 - i for i in range(27)])
    lz = Signal(5)
    m.d.comb += lz.eq(_lzc(m, raw[:27] | marker, "lzc"))

    # An exact zero is +0 under RNE unless both inputs are -0.
    sign = Signal()
    m.d.comb += sign.eq(Mux(raw == 0, both_neg, sign_big))

    raw, lz, e_big, sign, nan, inf, inf_sign = cut(
        raw=raw, lz=lz, e_big=e_big, sign=sign, nan=nan, inf=inf, inf_sign=inf_sign)

    # ---- stage 3: normalise, round, pack, special cases
    # Carry out: shift right one (keeping sticky); otherwise shift left by lz.
    norm = Signal(27)
    exp = Signal(9)
    with m.If(raw[27]):
        m.d.comb += [
            norm.eq(Cat(raw[1] | raw[0], raw[2:28])),
            exp.eq(e_big + 1),
        ]
    with m.Else():
        m.d.comb += [
            norm.eq(raw[:27] << lz),
            # No hidden bit after the shift means a subnormal (exponent field 0).
            exp.eq(Mux(norm[26], e_big - lz, 0)),
        ]

    # Round to nearest even: adding the increment to {exp, fraction} lets a
    # fraction carry bump the exponent (also subnormal -> smallest normal).
    lsb, guard, rnd, stk = norm[3], norm[2], norm[1], norm[0]
    round_up = guard & (rnd | stk | lsb)
    packed = Signal(32)
    m.d.comb += packed.eq(Cat(norm[3:26], exp) + round_up)
    overflow = packed[23:32] >= 0xFF

    s = Signal(32)
    with m.If(nan):
        m.d.comb += s.eq(F32_QNAN)
    with m.Elif(inf):
        m.d.comb += s.eq(Cat(Const(0, 23), Const(0xFF, 8), inf_sign))
    with m.Elif(overflow):
        m.d.comb += s.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Else():
        m.d.comb += s.eq(Cat(packed[:31], sign))
    return s


class FP16MulToFP32(wiring.Component):
    """Exact binary16 x binary16 -> binary32 product (never needs rounding)."""

    a: In(16)
    b: In(16)
    p: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(_mul_logic(m, self.a, self.b, _comb_cut))
        return m


class FP16MulToFP32Pipe(wiring.Component):
    """`FP16MulToFP32` in `MUL_STAGES` logic stages: ``p`` at cycle t+MUL_STAGES-1
    is the product of ``a`` and ``b`` at cycle t (``p`` is combinational from the
    last stage; the consumer registers it)."""

    a: In(16)
    b: In(16)
    p: Out(32)

    def elaborate(self, platform):
        m = Module()
        cut = _sync_cut(m, "mul_s")
        m.d.comb += self.p.eq(_mul_logic(m, self.a, self.b, cut))
        assert cut.boundaries == MUL_STAGES - 1
        return m


class FP32Add(wiring.Component):
    """binary32 + binary32 with RNE rounding, gradual underflow, canonical NaN."""

    a: In(32)
    b: In(32)
    s: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.s.eq(_add_logic(m, self.a, self.b, _comb_cut))
        return m


class FP32AddPipe(wiring.Component):
    """`FP32Add` in `ADD_STAGES` logic stages: ``s`` at cycle t+ADD_STAGES-1 is
    the sum of ``a`` and ``b`` at cycle t (``s`` is combinational from the last
    stage; the consumer registers it)."""

    a: In(32)
    b: In(32)
    s: Out(32)

    def elaborate(self, platform):
        m = Module()
        cut = _sync_cut(m, "add_s")
        m.d.comb += self.s.eq(_add_logic(m, self.a, self.b, cut))
        assert cut.boundaries == ADD_STAGES - 1
        return m


class FP32ToFP16(wiring.Component):
    """binary32 -> binary16 narrowing with RNE rounding, matching numpy."""

    a: In(32)
    h: Out(16)

    def elaborate(self, platform):
        m = Module()

        sign, e, f = self.a[31], self.a[23:31], self.a[:23]
        nan = (e == 0xFF) & f.any()
        inf = (e == 0xFF) & ~f.any()
        # binary32 subnormals lie far below half the smallest binary16 subnormal,
        # so they need no special case: the shift below flushes them to +-0.
        sig = Cat(f, e.any())

        # Binary16 biased exponent is e-112. Results below the normal range get
        # right-shifted by 113-e; 12 places already leaves guard=0 (rounds to 0).
        shift = Signal(4)
        m.d.comb += shift.eq(Mux(e >= 113, 0, Mux(e <= 101, 12, 113 - e)))
        shifted, sticky = _shr_sticky(m, sig, shift, "denorm")

        exp = Signal(5)
        m.d.comb += exp.eq(Mux(e >= 113, e - 112, 0))
        packed = _round_to_fp16(m, shifted, sticky, 13, exp, "narrow")

        with m.If(nan):
            m.d.comb += self.h.eq(F16_QNAN)
        with m.Elif(inf | (e >= 143)):  # |x| >= 2^16 overflows regardless of rounding
            m.d.comb += self.h.eq(Cat(Const(0x7C00, 15), sign))
        with m.Else():
            m.d.comb += self.h.eq(Cat(packed, sign))
        return m


def fp16_to_fp32(m, h, name):
    """The binary32 word of binary16 ``h``, exactly (a binary16 subnormal is a binary32
    normal): the same word as `FP16MulToFP32` of ``h`` and 1.0 (NaN canonical, zero's sign
    kept), from a 10-bit leading-zero count and a shift rather than a multiplier."""
    sign, e, f = h[15], h[10:15], h[:10]
    lz, sub_frac, a = Signal(4, name=f"{name}_lz"), Signal(10, name=f"{name}_sub"), Signal(32, name=name)
    # a subnormal f * 2^-24 with its leading one at bit 9 - lz: that one becomes the hidden
    # bit, the biased exponent 127 - 15 - lz
    m.d.comb += [lz.eq(_lzc(m, f, f"{name}_lzc")), sub_frac.eq(f << (lz + 1))]
    with m.If((e == 0x1F) & f.any()):
        m.d.comb += a.eq(F32_QNAN)
    with m.Elif(e == 0x1F):
        m.d.comb += a.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Elif((e == 0) & ~f.any()):
        m.d.comb += a.eq(Cat(Const(0, 31), sign))
    with m.Elif(e == 0):
        m.d.comb += a.eq(Cat(Const(0, 13), sub_frac, (112 - lz)[:8], sign))
    with m.Else():
        m.d.comb += a.eq(Cat(Const(0, 13), f, (e + 112)[:8], sign))
    return a


class FP16ToFP32(wiring.Component):
    """binary16 -> binary32 widening (`fp16_to_fp32`), exact."""

    h: In(16)
    a: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.a.eq(fp16_to_fp32(m, self.h, "widen"))
        return m

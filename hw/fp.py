"""Bit-exact IEEE 754 floating-point datapath blocks (purely combinational).

All rounding is round-to-nearest, ties-to-even; every NaN output is the
canonical quiet NaN (0x7FC00000 for binary32, 0x7E00 for binary16).  The
blocks are combinational so the caller decides where to pipeline them.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FP16MulToFP32", "FP32Add", "FP32ToFP16"]

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


class FP16MulToFP32(wiring.Component):
    """Exact binary16 x binary16 -> binary32 product (never needs rounding)."""

    a: In(16)
    b: In(16)
    p: Out(32)

    def elaborate(self, platform):
        m = Module()

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

        sa, siga, expa, a_inf, a_nan, a_zero = unpack(self.a, "a")
        sb, sigb, expb, b_inf, b_nan, b_zero = unpack(self.b, "b")
        sign = sa ^ sb

        prod = Signal(22)
        m.d.comb += prod.eq(siga * sigb)

        # Normalise the 22-bit product so its leading one sits at bit 21.
        lz = Signal(5)
        norm = Signal(22)
        m.d.comb += [
            lz.eq(_lzc(m, prod, "lzc")),
            norm.eq(prod << lz),
        ]
        # value = prod * 2^(expa+expb-50); leading one at 21-lz
        # => biased binary32 exponent = expa+expb-29-lz+127, always in 79..158.
        exp = Signal(8)
        m.d.comb += exp.eq(expa + expb + 98 - lz)

        with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
            m.d.comb += self.p.eq(F32_QNAN)
        with m.Elif(a_inf | b_inf):
            m.d.comb += self.p.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
        with m.Elif(a_zero | b_zero):
            m.d.comb += self.p.eq(Cat(Const(0, 31), sign))
        with m.Else():
            m.d.comb += self.p.eq(Cat(Const(0, 2), norm[:21], exp, sign))
        return m


class FP32Add(wiring.Component):
    """binary32 + binary32 with RNE rounding, gradual underflow, canonical NaN."""

    a: In(32)
    b: In(32)
    s: Out(32)

    def elaborate(self, platform):
        m = Module()

        def classify(x, name):
            inf, nan = Signal(name=f"{name}_inf"), Signal(name=f"{name}_nan")
            m.d.comb += [
                inf.eq((x[23:31] == 0xFF) & ~x[:23].any()),
                nan.eq((x[23:31] == 0xFF) & x[:23].any()),
            ]
            return x[31], inf, nan

        sa, a_inf, a_nan = classify(self.a, "a")
        sb, b_inf, b_nan = classify(self.b, "b")

        # Order operands by magnitude (IEEE encodings sort like integers) so the
        # subtraction below never goes negative and the result sign is the big one's.
        swap = Signal()
        m.d.comb += swap.eq(self.b[:31] > self.a[:31])
        big = Signal(32)
        small = Signal(32)
        m.d.comb += [
            big.eq(Mux(swap, self.b, self.a)),
            small.eq(Mux(swap, self.a, self.b)),
        ]
        # Subnormals have no hidden bit and use effective exponent 1.
        h_big = Signal()
        h_small = Signal()
        e_big = Signal(8)
        e_small = Signal(8)
        m.d.comb += [
            h_big.eq(big[23:31].any()),
            h_small.eq(small[23:31].any()),
            e_big.eq(Mux(h_big, big[23:31], 1)),
            e_small.eq(Mux(h_small, small[23:31], 1)),
        ]
        sig_big = Cat(big[:23], h_big)
        sig_small = Cat(small[:23], h_small)
        subtract = Signal()
        m.d.comb += subtract.eq(sa ^ sb)

        # Align: 24-bit significand + guard/round/sticky (27 bits). Shifts >= 27
        # push everything into sticky, so clamp the distance to 5 bits.
        diff = Signal(8)
        m.d.comb += diff.eq(e_big - e_small)
        dist = Signal(5)
        m.d.comb += dist.eq(Mux(diff[5:].any(), 31, diff[:5]))
        aligned, sticky = _shr_sticky(m, Cat(Const(0, 3), sig_small), dist, "align")
        # Jam the sticky into the LSB: correct for both add and subtract because
        # the normaliser shifts left by at most one place whenever sticky can be set.
        small_ext = Signal(27)
        m.d.comb += small_ext.eq(aligned | sticky)
        big_ext = Cat(Const(0, 3), sig_big)

        raw = Signal(28)
        m.d.comb += raw.eq(Mux(subtract, big_ext - small_ext, big_ext + small_ext))

        # Normalise. Carry out: shift right one (keeping sticky). Otherwise shift
        # left by the leading-zero count, but never below exponent 1: a marker bit
        # at position 27-e_big stops the count there (gradual underflow).
        marker = Cat(*[e_big == 27 - i for i in range(27)])
        lz = Signal(5)
        m.d.comb += lz.eq(_lzc(m, raw[:27] | marker, "lzc"))
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

        # An exact zero is +0 under RNE unless both inputs are -0.
        sign = Signal()
        m.d.comb += sign.eq(Mux(raw == 0, sa & sb, big[31]))

        with m.If(a_nan | b_nan | (a_inf & b_inf & subtract)):
            m.d.comb += self.s.eq(F32_QNAN)
        with m.Elif(a_inf | b_inf):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), Mux(a_inf, sa, sb)))
        with m.Elif(overflow):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
        with m.Else():
            m.d.comb += self.s.eq(Cat(packed[:31], sign))
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
        lsb, guard = shifted[13], shifted[12]
        round_up = guard & (sticky | shifted[:12].any() | lsb)
        # Rounding carry into the exponent handles subnormal -> normal and 65520 -> inf.
        packed = Signal(15)
        m.d.comb += packed.eq(Cat(shifted[13:23], exp) + round_up)

        with m.If(nan):
            m.d.comb += self.h.eq(F16_QNAN)
        with m.Elif(inf | (e >= 143)):  # |x| >= 2^16 overflows regardless of rounding
            m.d.comb += self.h.eq(Cat(Const(0x7C00, 15), sign))
        with m.Else():
            m.d.comb += self.h.eq(Cat(packed, sign))
        return m

"""FP blocks of the softmax unit (hw/softmax_unit.py) that hw/fp.py lacks.

- `ExpApprox` / `ExpApproxPipe`: e = exp_approx(d) for FP32 d <= 0 (or NaN), in fixed
  point, bit for bit as `sim/golden.py` `exp_approx` defines it:
      D = trunc(d * 2^24)                  (signed; the significand shifted by its exponent)
      T = (D * LOG2E_Q) >> 30              (floor), LOG2E_Q = round(log2(e) * 2^30)
      i = T >> 24, idx = T[18:24], frac = T[0:18]
      y = TAB[idx] + ((DIFF[idx] * frac) >> 18),   TAB[k] = round(2^(k/64) * 2^23),
                                                    DIFF[k] = TAB[k+1] - TAB[k]
      e = FP32(exponent field 127 + i, fraction y - 2^23), or +0 when 127 + i <= 0.
  NaN gives the canonical NaN, d < -104 (-inf included) gives +0. Positive d never
  reaches the unit (d = x - max); the block's output for it is unspecified.
  Three stages: D, T and (table, interpolation, pack).
- `FP32MulToFP16` / `FP32MulToFP16Pipe`: FP16_RNE(a * b) of two FP32 values, the 48-bit
  significand product taken exactly and rounded once (FP16 subnormals kept, overflow to
  infinity, canonical NaN 0x7E00). FP32 subnormal inputs count as zero: exact whenever
  the other operand is below 2^100 (the unit multiplies e <= 1 by r <= 1). Two stages:
  (classify, product) and (normalise, round, pack).
- `FP32Recip`: r = 1/x correctly rounded (RNE), a restoring divider with one quotient bit
  per cycle and a fixed latency of `RECIP_CYCLES` from `start` to `done`. Exact for every
  normal x below 2^126 (the unit gives it 1 <= l < 2^21); NaN -> NaN, +-inf -> +-0,
  +-0 and subnormals -> +-inf, |x| >= 2^126 -> +-0 (the true result is subnormal there).

The pipelined variants follow hw/fp.py: the result at cycle t + STAGES - 1 is f(inputs
at cycle t), combinational from the last stage; no enable, the pipeline always advances.
"""
import struct

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from isa.exp_approx import EXP_MIN, EXP_TAB, LOG2E_Q
from isa.microarch import SOFTMAX_EXP_CYCLES, SOFTMAX_MULH_CYCLES

from .fp import F16_QNAN, F32_QNAN, _comb_cut, _round_to_fp16, _shr_sticky, _sync_cut

__all__ = ["ExpApprox", "ExpApproxPipe", "FP32MulToFP16", "FP32MulToFP16Pipe", "FP32Recip",
           "EXP_STAGES", "MULH_STAGES", "RECIP_CYCLES", "LOG2E_Q", "EXP_TAB", "EXP_MIN_BITS"]

EXP_MIN_BITS = struct.unpack("<I", struct.pack("<f", -EXP_MIN))[0]   # |d| above 104.0 gives +0

# the cells' stages are isa/microarch.py's (the softmax unit's cycles and its model follow them)
EXP_STAGES = SOFTMAX_EXP_CYCLES
MULH_STAGES = SOFTMAX_MULH_CYCLES
QUOTIENT_BITS = 25                       # 24 significand bits and a guard bit
RECIP_CYCLES = QUOTIENT_BITS + 1         # start, one cycle per quotient bit, done with r


# ---- exp ---------------------------------------------------------------------------------

def _exp_logic(m, d, cut):
    # ---- stage 1: D = trunc(d * 2^24)
    sign, ed, frac = d[31], d[23:31], d[:23]
    nan, small = Signal(name="exp_nan"), Signal(name="exp_small")
    m.d.comb += [nan.eq((ed == 0xFF) & frac.any()),
                 small.eq(sign & (d[:31] > EXP_MIN_BITS))]
    # |d| * 2^24 = sig * 2^(ed - 126): sig << 7 shifted right by 133 - ed (|d| < 128 here;
    # beyond, `small` decides). 31 places and more leave 0.
    shift = Signal(5, name="exp_shift")
    m.d.comb += shift.eq(Mux(ed < 102, 31, 133 - ed))
    mag = Signal(31, name="exp_mag")
    m.d.comb += mag.eq(Cat(Const(0, 7), frac, ed.any()) >> shift)
    big_d = Signal(signed(32), name="exp_D")
    m.d.comb += big_d.eq(Mux(sign, -mag, mag))

    big_d, nan, small = cut(big_d=big_d, nan=nan, small=small)

    # ---- stage 2: T = (D * LOG2E_Q) >> 30 (a product by a constant: 57 gate levels with
    # the shift before it in one stage)
    product = Signal(signed(64), name="exp_DQ")
    m.d.comb += product.eq(big_d * Const(LOG2E_Q, 32))
    t = Signal(signed(34), name="exp_T")
    m.d.comb += t.eq(product >> 30)

    t, nan, small = cut(t=t, nan=nan, small=small)

    # ---- stage 3: table, interpolation, pack
    idx, fr = t[18:24], t[:18]
    base = Signal(24, name="exp_base")
    diff = Signal(18, name="exp_diff")
    m.d.comb += [base.eq(Array(Const(v, 24) for v in EXP_TAB[:64])[idx]),
                 diff.eq(Array(Const(EXP_TAB[k + 1] - EXP_TAB[k], 18) for k in range(64))[idx])]
    y = Signal(24, name="exp_y")
    m.d.comb += y.eq(base + ((diff * fr) >> 18))
    biased = Signal(signed(11), name="exp_biased")
    m.d.comb += biased.eq((t >> 24) + 127)
    e = Signal(32, name="exp_e")
    with m.If(nan):
        m.d.comb += e.eq(F32_QNAN)
    with m.Elif(small | (biased <= 0)):
        m.d.comb += e.eq(0)
    with m.Else():
        m.d.comb += e.eq(Cat(y[:23], biased[:8], Const(0, 1)))
    return e


class ExpApprox(wiring.Component):
    """e = exp_approx(d), combinational."""
    d: In(32)
    e: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.e.eq(_exp_logic(m, self.d, _comb_cut))
        return m


class ExpApproxPipe(wiring.Component):
    """`ExpApprox` in EXP_STAGES stages: `e` at t + 2 is exp_approx(`d` at t)."""
    d: In(32)
    e: Out(32)

    def elaborate(self, platform):
        m = Module()
        cut = _sync_cut(m, "exp_s")
        m.d.comb += self.e.eq(_exp_logic(m, self.d, cut))
        assert cut.boundaries == EXP_STAGES - 1
        return m


# ---- product rounded to FP16 --------------------------------------------------------------

def _mulh_logic(m, a, b, cut):
    # ---- stage 1: classify, exact significand product, exponent sum
    def classify(x, name):
        e, f = x[23:31], x[:23]
        zero, inf, nan = (Signal(name=f"{name}_{n}") for n in ("zero", "inf", "nan"))
        m.d.comb += [zero.eq(e == 0), inf.eq((e == 0xFF) & ~f.any()), nan.eq((e == 0xFF) & f.any())]
        return x[31], e, Cat(f, Const(1, 1)), zero, inf, nan

    sa, ea, siga, a_zero, a_inf, a_nan = classify(a, "a")
    sb, eb, sigb, b_zero, b_inf, b_nan = classify(b, "b")
    prod = Signal(48, name="mulh_prod")
    m.d.comb += prod.eq(siga * sigb)
    esum = Signal(9, name="mulh_esum")
    m.d.comb += esum.eq(ea + eb)
    nan, inf, zero = Signal(name="mulh_nan"), Signal(name="mulh_inf"), Signal(name="mulh_zero")
    m.d.comb += [nan.eq(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)),
                 inf.eq(a_inf | b_inf), zero.eq(a_zero | b_zero)]

    prod, esum, sign, nan, inf, zero = cut(prod=prod, esum=esum, sign=sa ^ sb, nan=nan, inf=inf, zero=zero)

    # ---- stage 2: value = prod * 2^(esum - 300); leading one at 46 + prod[47]
    top = prod[47]
    norm = Signal(48, name="mulh_norm")
    m.d.comb += norm.eq(Mux(top, prod, prod << 1))
    hexp = Signal(signed(11), name="mulh_hexp")           # FP16 biased exponent
    m.d.comb += hexp.eq(esum + top - 239)
    normal = hexp >= 1
    shift = Signal(6, name="mulh_shift")                  # below the normal range: gradual underflow
    m.d.comb += shift.eq(Mux(normal, 0, Mux(hexp < -47, 49, 1 - hexp)))
    shifted, sticky = _shr_sticky(m, norm, shift, "mulh_den")
    packed = _round_to_fp16(m, shifted, sticky, 37, Mux(normal, hexp[:5], 0), "mulh")

    h = Signal(16, name="mulh_h")
    with m.If(nan):
        m.d.comb += h.eq(F16_QNAN)
    with m.Elif(inf):
        m.d.comb += h.eq(Cat(Const(0x7C00, 15), sign))
    with m.Elif(zero):
        m.d.comb += h.eq(Cat(Const(0, 15), sign))
    with m.Elif(hexp >= 31):
        m.d.comb += h.eq(Cat(Const(0x7C00, 15), sign))
    with m.Else():
        m.d.comb += h.eq(Cat(packed, sign))
    return h


class FP32MulToFP16(wiring.Component):
    """h = FP16_RNE(a * b), exact product rounded once; combinational."""
    a: In(32)
    b: In(32)
    h: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.h.eq(_mulh_logic(m, self.a, self.b, _comb_cut))
        return m


class FP32MulToFP16Pipe(wiring.Component):
    """`FP32MulToFP16` in MULH_STAGES stages: `h` at t + 1 is the result of `a`, `b` at t."""
    a: In(32)
    b: In(32)
    h: Out(16)

    def elaborate(self, platform):
        m = Module()
        cut = _sync_cut(m, "mulh_s")
        m.d.comb += self.h.eq(_mulh_logic(m, self.a, self.b, cut))
        assert cut.boundaries == MULH_STAGES - 1
        return m


# ---- reciprocal ---------------------------------------------------------------------------

class FP32Recip(wiring.Component):
    """r = 1/x (FP32, RNE). `x` is sampled in the `start` cycle; `done` pulses RECIP_CYCLES
    cycles later, with `r` valid from then until the next `start`.

    x = 1.f * 2^(E-127): the quotient num/sig, sig = 1f (24 bits), num = 2^24 (2^23 when
    f = 0, so the quotient lies in [1, 2)), is developed one bit per cycle by restoring
    division into 25 bits (24 + guard); the remainder gives the sticky bit. The biased
    result exponent is 253 - E (254 - E when f = 0)."""
    start: In(1)
    x: In(32)
    done: Out(1)
    r: Out(32)

    def elaborate(self, platform):
        m = Module()
        x = self.x
        ex, fx = x[23:31], x[:23]
        rem = Signal(26)
        den = Signal(24)
        q = Signal(QUOTIENT_BITS)
        count = Signal(range(QUOTIENT_BITS + 1))
        exp = Signal(8)
        sign, nan, inf, zero, tiny = Signal(), Signal(), Signal(), Signal(), Signal()
        running = Signal()

        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            m.d.sync += [
                rem.eq(Mux(fx.any(), 1 << 24, 1 << 23)), den.eq(Cat(fx, Const(1, 1))), q.eq(0),
                count.eq(QUOTIENT_BITS), running.eq(1),
                exp.eq(Mux(fx.any(), 253, 254) - ex), sign.eq(x[31]),
                nan.eq((ex == 0xFF) & fx.any()), inf.eq(ex == 0xFF), zero.eq(ex == 0),
                tiny.eq(ex >= 253),
            ]
        with m.Elif(running):
            ge = rem >= den
            m.d.sync += [rem.eq(Mux(ge, rem - den, rem) << 1), q.eq(Cat(ge, q[:-1])),
                         count.eq(count - 1)]
            with m.If(count == 1):
                m.d.sync += [running.eq(0), self.done.eq(1)]

        round_up = q[0] & (rem.any() | q[1])
        packed = Signal(31)
        m.d.comb += packed.eq(Cat(q[1:24], exp) + round_up)
        with m.If(nan):
            m.d.comb += self.r.eq(F32_QNAN)
        with m.Elif(inf | tiny):
            m.d.comb += self.r.eq(Cat(Const(0, 31), sign))
        with m.Elif(zero):
            m.d.comb += self.r.eq(Cat(Const(0x7F800000, 31), sign))
        with m.Else():
            m.d.comb += self.r.eq(Cat(packed, sign))
        return m

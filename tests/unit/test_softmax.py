"""The softmax unit (hw/softmax_unit.py, hw/fp_sfu.py) against its golden model
(sim/golden.py `softmax_rows`, `exp_approx`) and its cycle model (sim/softmax_unit.py),
and the golden model's accuracy against float64.

DeviceConfig only allows lanes = data_bits / 16 >= 32, and the unit reads nothing of its
config but `lanes` (a line of the buffers) and `softmax_lanes` (its own), so the special
rows run on a stand-in config of 8 lanes in a line of 8 (`LANES8`), the long rows on one of
8 lanes in a line of 32 (`LINE32`: four words a line), the default config's rows 16 lanes
in a line of 32. Lanes past the row's end in its last source line hold garbage (+inf and
NaN) the unit must ignore.
"""
import fractions
import math
import os
import time
import types

import numpy as np
import pytest
from amaranth.sim import Simulator

import isa
from hw import fp_sfu
from hw.fp_sfu import ExpApprox, FP32MulToFP16, FP32Recip
from hw.softmax_unit import SoftmaxUnit
from isa.microarch import softmax_lines_clear
from sim import golden
from sim import softmax_unit as model

CFG = isa.load_config("default")
LANES8 = types.SimpleNamespace(name="lanes8", lanes=8, softmax_lanes=8)
LINE32 = types.SimpleNamespace(name="line32", lanes=32, softmax_lanes=8)
F32_QNAN, F16_QNAN = 0x7FC00000, 0x7E00
GARBAGE = (0x7F800000, 0x7FC00001)
STALE_LINE = int("7fc00001" * 512, 16)          # a line of NaNs: on the source when no line is read
SEED = 20250101
FULL = os.environ.get("NDP_TEST_FULL", "") not in ("", "0")     # make test-full: tests/conftest.py


def f32(values):
    return np.asarray(values, dtype=np.float32)


def bits32(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


# ---- harnesses -----------------------------------------------------------------------------

def run_comb(dut, inputs, output):
    cols = {k: [int(x) for x in v] for k, v in inputs.items()}
    n = len(next(iter(cols.values())))
    out = []

    async def bench(ctx):
        for i in range(n):
            for k, v in cols.items():
                ctx.set(getattr(dut, k), v[i])
            out.append(ctx.get(getattr(dut, output)))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return np.array(out, dtype=np.uint64)


def run_unit(cfg, jobs):
    """Run (row float32, partial) jobs through one SoftmaxUnit; per job (out uint16 [n],
    m bits, l bits, cycles start -> done, line addresses written in order)."""
    lanes = cfg.lanes          # a line's
    dut = SoftmaxUnit(cfg, shared_cells=False)
    results = []

    async def bench(ctx):
        for x, partial in jobs:
            n = len(x)
            words = -(-n // lanes)
            raw = np.zeros(words * lanes, np.uint32)
            raw[n:] = np.resize(np.array(GARBAGE, np.uint32), words * lanes - n)
            raw[:n] = bits32(x)
            mem = [int.from_bytes(raw[w * lanes:(w + 1) * lanes].tobytes(), "little") for w in range(words)]
            ctx.set(dut.start, 1)
            ctx.set(dut.length, n)
            ctx.set(dut.partial, partial)
            cycle, writes, written, port = 0, [], [], {"read": set(), "write": set()}
            while True:
                addr, asked = ctx.get(dut.src_addr), ctx.get(dut.src_en)
                if asked:
                    port["read"].add(cycle + 1)          # the buffer's port reads the cycle after
                if ctx.get(dut.dst_en):
                    port["write"].add(cycle)
                    writes.append((ctx.get(dut.dst_addr), ctx.get(dut.dst_data)))
                if ctx.get(dut.written):
                    written.append((cycle, len(writes)))
                if cycle > 0:
                    assert ctx.get(dut.busy)
                    if ctx.get(dut.done):
                        break
                assert cycle < 20 * words + 200, "the unit hangs"
                await ctx.tick()
                cycle += 1
                ctx.set(dut.start, 0)
                # the line asked, else garbage: the unit keeps the lines it needs
                ctx.set(dut.src_data, mem[addr] if asked and addr < words else STALE_LINE % (1 << (32 * lanes)))
            m_bits, l_bits = ctx.get(dut.m), ctx.get(dut.l)
            await ctx.tick()
            assert not ctx.get(dut.busy) and not ctx.get(dut.done)
            out = np.zeros(words * lanes, np.uint16)
            for a, value in writes:
                out[a * lanes:(a + 1) * lanes] = np.frombuffer(value.to_bytes(2 * lanes, "little"), np.uint16)
            assert not out[n:].any(), "lanes past the end must be written as 0"
            results.append((out[:n], m_bits, l_bits, cycle, [a for a, _ in writes], written, port))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results


def check_unit(cfg, jobs):
    for (x, partial), (out, m_bits, l_bits, cycles, addrs, written, port) in zip(jobs, run_unit(cfg, jobs)):
        n = len(x)
        want_out, want_m, want_l = golden.softmax_rows(x[None, :], partial, cfg.softmax_lanes)
        what = f"lanes={cfg.softmax_lanes} line={cfg.lanes} length={n} partial={partial}"
        assert cycles == model.cycles(n, partial, cfg), what
        # partial: `written` once, in the cycle of the last write (every line written by then)
        lines = -(-n // cfg.lanes)
        want_written = [(model.written_cycles(n, cfg), lines)] if partial and n else []
        assert written == want_written, what
        assert addrs == list(range(lines)), what
        # a line read every lanes / softmax_lanes cycles, none in a cycle with a write where
        # the config allows SOFTMAX in place on a one-port bank (isa/microarch.py)
        assert len(port["read"]) == (2 if partial else 3) * lines, what          # two passes, or three
        if softmax_lines_clear(cfg.lanes // cfg.softmax_lanes):
            assert not port["read"] & port["write"], f"{what}: read and write in cycles {port['read'] & port['write']}"
        assert m_bits == int(bits32(want_m)[0]), f"{what}: m {m_bits:#x} != {int(bits32(want_m)[0]):#x}"
        assert l_bits == int(bits32(want_l)[0]), f"{what}: l {l_bits:#x} != {int(bits32(want_l)[0]):#x}"
        bad = np.nonzero(out != want_out[0].view(np.uint16))[0]
        assert len(bad) == 0, f"{what}: {len(bad)} outputs differ, first at {bad[0]}: " \
                              f"{out[bad[0]]:#x} != {want_out[0].view(np.uint16)[bad[0]]:#x}"


# ---- constants -----------------------------------------------------------------------------

def test_constants_shared_by_rtl_and_golden():
    assert fp_sfu.LOG2E_Q == golden.EXP_LOG2E_Q == round(math.log2(math.e) * 2**30)
    assert fp_sfu.EXP_TAB == golden.EXP_TAB.tolist()
    assert fp_sfu.EXP_TAB[0] == 1 << 23 and fp_sfu.EXP_TAB[64] == 1 << 24
    assert max(b - a for a, b in zip(fp_sfu.EXP_TAB, fp_sfu.EXP_TAB[1:])) < 1 << 18
    assert fp_sfu.EXP_MIN_BITS == int(bits32(-golden.EXP_MIN)) and fp_sfu.RECIP_CYCLES + 1 == model.RECIP


# ---- the FP blocks against the golden --------------------------------------------------------

def exp_inputs(rng):
    specials = f32([0.0, -0.0, -104.0, np.nextafter(np.float32(-104), np.float32(0)),
                    np.nextafter(np.float32(-104), np.float32(-200)), -105, -128, -1e30, -np.inf, np.nan,
                    -1e-45, -1e-38, -2.0**-24, -2.0**-25, -(2.0**-24) * 1.5, -87.33, -87.34, -1, -0.5, -64, -100])
    uniform = -rng.uniform(0, 110, 1500)
    logs = -(2.0 ** rng.uniform(-30, 7, 1500))
    raw = f32(np.concatenate([uniform, logs]))
    return np.concatenate([specials, raw, -np.abs(rng.integers(0, 1 << 31, 300, dtype=np.uint32).view(np.float32))])


def test_exp_unit_bit_exact():
    d = exp_inputs(np.random.default_rng(SEED))
    d = d[~(d > 0)]
    got = run_comb(ExpApprox(), {"d": bits32(d)}, "e")
    want = bits32(golden.exp_approx(d)).astype(np.uint64)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(float(d[i]), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


def test_exp_golden_accuracy():
    """Relative error against float64 exp where the result is normal (d >= -87.33);
    below, the result is 0 or within 2^-126 of it."""
    rng = np.random.default_rng(SEED)
    d = f32(np.concatenate([rng.uniform(-87.33, 0, 2_000_000), -np.logspace(-12, 0, 50_000), [0.0, -0.0]]))
    e = golden.exp_approx(d).astype(np.float64)
    ref = np.exp(d.astype(np.float64))
    rel = np.abs(e - ref) / ref
    bound = (1 / 64) ** 2 / 8 * math.log(2) ** 2
    print(f"exp_approx: max relative error {rel.max():.4g} at d = {d[rel.argmax()]} "
          f"(interpolation bound {bound:.4g})")
    assert rel.max() < 1.5e-5
    assert golden.exp_approx(f32([0.0, -0.0])).tolist() == [1.0, 1.0]
    low = f32(np.linspace(-104, -87.33, 100_000))
    assert np.abs(golden.exp_approx(low) - np.exp(low.astype(np.float64))).max() <= 2.0**-126
    assert np.all(golden.exp_approx(f32([-104.01, -1e30, -np.inf])) == 0)
    e = golden.exp_approx(f32(-np.sort(rng.uniform(0, 104, 10_000))))
    assert np.all(np.diff(e.astype(np.float64)) <= 0), "exp_approx is monotonic"


def fp16_round_exact(v):
    """RNE of the exact rational v to FP16 bits (subnormals, overflow), by integers."""
    sign = 0x8000 if v < 0 else 0
    v = abs(v)
    if v == 0:
        return sign
    exp = max(math.floor(math.log2(v)), -14)
    while fractions.Fraction(2) ** exp > v:
        exp -= 1
    while fractions.Fraction(2) ** (exp + 1) <= v:
        exp += 1
    quantum = fractions.Fraction(2) ** (max(exp, -14) - 10)
    q, rem = divmod(v, quantum)
    if rem * 2 > quantum or (rem * 2 == quantum and q % 2):
        q += 1
    value = q * quantum
    if value >= 65536:
        return sign | 0x7C00
    return sign | int(np.float16(float(value)).view(np.uint16))


def fp16_ties(rng, n):
    """FP32 pairs whose exact products lie halfway between two FP16 values: odd t1 * t2
    of 12 bits at an exponent in the normal range, or of fewer bits at 2^-25 (subnormal)."""
    t1 = 2 * rng.integers(0, 32, n) + 1
    t2 = 2 * rng.integers(0, (4096 // t1 + 1) // 2) + 1
    t2 = np.minimum(t2, 4095 // t1 | 1)
    bits = np.array([int(v).bit_length() for v in t1 * t2])
    low = np.where(bits == 12, rng.integers(-14, 16, n) - 11, -25)
    split = rng.integers(-20, 20, n)
    sign = rng.choice([-1.0, 1.0], n)
    return f32(sign * t1 * 2.0 ** split), f32(t2 * 2.0 ** (low - split))


def product_pairs(rng):
    """FP32 pairs: exact FP16 ties, random pairs around FP16's range, special values."""
    ta, tb = fp16_ties(rng, 2000)
    ra = f32(rng.uniform(0.5, 1, 3000) * 2.0 ** rng.integers(-30, 1, 3000))
    rb = f32(rng.uniform(-1, 1, 3000) * 2.0 ** rng.integers(-24, 18, 3000))
    sa = f32([0, -0.0, np.inf, -np.inf, np.nan, 1, 1, 1e-40, 3e38, 65504, 65520, 2.0**-25, 2.0**-24, 1.5 * 2**-25])
    sb = f32([np.inf, 1, 0, -2, 1, np.nan, -np.inf, 1e3, 3e38, 1, 1, 1, -1, 1])
    return np.concatenate([ta, ra, sa]), np.concatenate([tb, rb, sb])


def is_fp16_tie(v):
    v = abs(v)
    exp = max(math.floor(math.log2(v)), -14) if v else -14
    quantum = fractions.Fraction(2) ** (exp - 10)
    return v != 0 and (v / quantum).denominator == 2


def golden_product(a, b):
    with np.errstate(all="ignore"):
        return golden.canonical_nan((a.astype(np.float64) * b.astype(np.float64)).astype(np.float16))


def test_numpy_rounds_products_to_fp16_once():
    a, b = fp16_ties(np.random.default_rng(SEED), 2000)
    exact = [fractions.Fraction(float(x)) * fractions.Fraction(float(y)) for x, y in zip(a, b)]
    assert all(is_fp16_tie(p) for p in exact)
    # ties, and the neighbours just above and below them (a float64 on either side)
    for scale in (1.0, 1 + 2.0**-40, 1 - 2.0**-40):
        got = (a.astype(np.float64) * b.astype(np.float64) * scale).astype(np.float16).view(np.uint16)
        want = [fp16_round_exact(p * fractions.Fraction(scale)) for p in exact]
        assert got.tolist() == want, scale
    a, b = product_pairs(np.random.default_rng(SEED + 3))
    finite = np.isfinite(a) & np.isfinite(b) & (a != 0) & (b != 0)     # Fraction has no -0
    got = golden_product(a[finite], b[finite]).view(np.uint16)
    want = [fp16_round_exact(fractions.Fraction(float(x)) * fractions.Fraction(float(y)))
            for x, y in zip(a[finite], b[finite])]
    assert got.tolist() == want


def test_product_unit_bit_exact():
    a, b = product_pairs(np.random.default_rng(SEED + 1))
    got = run_comb(FP32MulToFP16(), {"a": bits32(a), "b": bits32(b)}, "h")
    want = golden_product(a, b).view(np.uint16).astype(np.uint64)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(float(a[i]), float(b[i]), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


def test_recip_unit_bit_exact():
    rng = np.random.default_rng(SEED)
    x = f32(np.concatenate([
        [1, 2, 3, 4096, 2.0**20, 2.0**21 - 1, 1.5, 2.0**-126, 2.0**125, np.nextafter(np.float32(2.0**126), 0),
         np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0],
        rng.uniform(1, 2.0**21, 200), 2.0 ** rng.uniform(-126, 125.9, 100), rng.integers(1, 1 << 20, 50)]))
    tiny = f32([2.0**126, 3e38, 1e-40])
    results = []
    dut = FP32Recip()

    async def bench(ctx):
        for v in np.concatenate([x, tiny]):
            ctx.set(dut.start, 1)
            ctx.set(dut.x, int(bits32(v)))
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                cycles += 1
            assert cycles == fp_sfu.RECIP_CYCLES
            results.append(ctx.get(dut.r))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    with np.errstate(divide="ignore"):
        want = bits32(np.float32(1) / x).copy()
    want[np.isnan(x)] = F32_QNAN
    assert [hex(v) for v in results[:len(x)]] == [hex(int(v)) for v in want]
    # outside the documented range: |x| >= 2^126 gives +0 (not a subnormal), subnormals +inf
    assert results[len(x):] == [0, 0, 0x7F800000]


# ---- the unit against the golden and the cycle model ----------------------------------------

def random_rows(rng, lengths, scale=16.0):
    return [f32(rng.uniform(-scale, scale, n)) for n in lengths]


def test_unit_default_lanes():
    rng = np.random.default_rng(SEED)
    lanes = CFG.softmax_lanes
    rows = random_rows(rng, [1, 2, lanes - 1, lanes, lanes + 1, 3 * lanes + 5])
    rows.append(f32(rng.standard_normal(2 * lanes + 3) * 1e4))
    check_unit(CFG, [(x, p) for x in rows for p in (0, 1)])


def special_rows(rng):
    n = 21
    row = lambda *v: f32(v)
    base = f32(rng.uniform(-16, 16, n))
    with_nan, with_pinf, with_ninf = base.copy(), base.copy(), base.copy()
    with_nan[5] = np.nan
    with_pinf[[3, 17]] = np.inf
    with_ninf[[0, 9, 20]] = -np.inf
    spread = f32(np.concatenate([[0.0, -1e30, -200, -104, -103.99, -87.3, -88, -3e38, -1e-40],
                                 rng.uniform(-120, 0, 12)]))
    return [
        f32(np.full(n, 3.5)), f32(np.full(3, -7.25)), with_nan, with_pinf, with_ninf,
        f32(np.full(n, -np.inf)), row(-np.inf, 1.0), row(np.nan), row(np.nan, np.nan, 1.0),
        spread, row(3e38, -3e38, 1.0), row(-3e38, -3e38),
        row(-0.0, 0.0, -0.0), row(-0.0, -0.0), row(0.0), row(1e-40, -1e-40, 0.0),
        f32(rng.uniform(-16, 16, n) * 2.0 ** rng.integers(-30, 30, n)),
        f32(np.arange(n) * -1.0), row(65504.0, 65504.0, 65000.0),
    ]


def test_unit_special_rows():
    rows = special_rows(np.random.default_rng(SEED))
    check_unit(LANES8, [(x, p) for x in rows for p in (0, 1)])


def test_unit_long_rows_lanes8():
    """Rows across word boundaries up to 1000 long; `make test` leaves out the 1000-long
    row (half of the simulated cycles: its 250 are long enough to reach the same states),
    `make test-full` (NDP_TEST_FULL=1, tests/conftest.py) runs it too."""
    rng = np.random.default_rng(SEED + 2)
    lanes = LINE32.softmax_lanes
    lengths = [1, 2, lanes - 1, lanes, lanes + 1, 3 * lanes + 5, 97, 250, 1000]
    rows = random_rows(rng, lengths) + [f32(rng.uniform(-200, 200, 300)), f32(rng.uniform(-1, 1, 333))]
    if not FULL:
        rows = [x for x in rows if len(x) < 1000]
    check_unit(LINE32, [(x, p) for x in rows for p in (0, 1)])


def test_unit_length_zero_finishes():
    """The decoder rejects length 0; the unit still finishes: m = -inf, l = +0, no write."""
    for cfg in (LANES8, LINE32):
        results = run_unit(cfg, [(f32([]), 0), (f32([]), 1), (f32([2.0, 1.0]), 0)])
        for (out, m_bits, l_bits, cycles, addrs, written, _), partial in zip(results[:2], (0, 1)):
            assert (len(out), m_bits, l_bits, addrs, written) == (0, 0xFF800000, 0, [], [])
            assert cycles == model.cycles(0, partial, cfg) == 1
        assert results[2][3] == model.cycles(2, 0, cfg)      # and the next row runs normally
    out, m, l = golden.softmax_rows(np.zeros((3, 0), np.float32))
    assert out.shape == (3, 0) and np.all(m == -np.inf) and np.all(l == 0)


def test_cycle_formula():
    # the max tree's stages (the lanes' keys registered, then 3 comparator levels a stage),
    # and the unit's steps with 3-cycle
    # adders, a 3-stage exp and a 2-stage product: the exp pass's pipe is 7 deep (source,
    # x - m 3, exp 3), its sums 2 more, the output pass's product 1 more. The adds after the
    # exp pass: the two combining p1 and p2 when there are that many words, and the tree's
    # levels, a one-word row only those whose partner lanes reach into it (ceil(log2 n))
    for lanes, lg, stages in ((8, 3, 1 + 1), (32, 5, 1 + 2), (512, 9, 1 + 3)):
        cfg = types.SimpleNamespace(lanes=4 * lanes, softmax_lanes=lanes)     # the line does not count
        for n in (1, 2, 3, lanes // 2 + 1, lanes, lanes + 1, 2 * lanes + 1, 4096):
            w = -(-n // lanes)
            adds = (w >= 2) + (w >= 3) + (lg if w > 1 else math.ceil(math.log2(n)))
            assert model.cycles(n, True, cfg) == 2 * w + stages + 9 + 3 * adds + 1, (lanes, n)
            assert model.cycles(n, False, cfg) == 3 * w + stages + 9 + 3 * adds + 27 + 8 + 1, (lanes, n)
            assert model.written_cycles(n, cfg) == 2 * w + stages + 8
    unit = model.SoftmaxUnit(CFG)
    out, m, l, cycles = unit.run(f32([1.0, 2.0, 3.0]), False)
    # the default config's 8 lanes: a max tree of 2 stages (keys, 3 levels)
    assert cycles == 3 + 2 + 9 + 3 * 2 + 36 and abs(float(out.astype(np.float64).sum()) - 1) < 2e-3


# ---- accuracy of the golden against float64 ---------------------------------------------------

def test_golden_accuracy_and_speed():
    rng = np.random.default_rng(SEED)
    lengths = np.concatenate([[1, 4096], rng.integers(1, 4097, 198)])
    worst_norm = worst_part = worst_l = 0.0
    start = time.perf_counter()
    for n in lengths:
        x = f32(rng.uniform(-16, 16, (1, n)))
        x64 = x.astype(np.float64)
        z = np.exp(x64 - x64.max())
        ref = z / z.sum()
        out, m, l = golden.softmax_rows(x)
        worst_norm = max(worst_norm, np.abs(out.astype(np.float64) - ref).max())
        pout, pm, pl = golden.softmax_rows(x, partial=True)
        assert pm[0] == m[0] == x.max() and bits32(pl)[0] == bits32(l)[0]
        worst_part = max(worst_part, np.abs(pout.astype(np.float64) / float(pl[0]) - ref).max())
        worst_l = max(worst_l, abs(float(pl[0]) - z.sum()) / z.sum())
    elapsed = time.perf_counter() - start
    print(f"softmax golden vs float64 over {len(lengths)} rows: normalized max abs error "
          f"{worst_norm:.3g}, partial FP16(e)/l {worst_part:.3g}, l relative {worst_l:.3g}; "
          f"{elapsed * 1e3:.0f} ms")
    assert worst_norm <= 1e-3 and worst_part <= 1e-3 and worst_l <= 1e-4
    x = f32(rng.uniform(-16, 16, (1, 4096)))
    start = time.perf_counter()
    golden.softmax_rows(x)
    assert time.perf_counter() - start < 0.05, "a 4096-long row takes milliseconds"


def test_golden_vectorized_over_rows():
    rng = np.random.default_rng(SEED)
    x = f32(rng.uniform(-16, 16, (5, 77)))
    x[2, 3] = np.nan
    for partial in (False, True):
        out, m, l = golden.softmax_rows(x, partial, 8)
        for r in range(5):
            o1, m1, l1 = golden.softmax_rows(x[r:r + 1], partial, 8)
            assert np.array_equal(out[r].view(np.uint16), o1[0].view(np.uint16))
            assert bits32(m)[r] == bits32(m1)[0] and bits32(l)[r] == bits32(l1)[0]
    assert bits32(m)[2] == F32_QNAN and bits32(l)[2] == F32_QNAN
    assert np.all(out[2].view(np.uint16) == F16_QNAN)
    with pytest.raises(ValueError):
        golden.exp_approx(f32([0.5]))

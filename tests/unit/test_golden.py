"""The golden model's documented arithmetic, checked on cases worked out by hand and against
the accumulation order of isa/pe_array.py written out as plainly as possible."""
import numpy as np
import pytest

from isa.pe_array import ACC_INTERLEAVE, plan
from sim import golden

LANES = 32


def f16(values):
    return np.array(values, dtype=np.float16)


def test_plan():
    assert plan(1, 32, 2) == plan(1, 32, 2).__class__(pack=32, n_words=1, sets=3, split=1)
    assert (plan(16, 32, 2).pack, plan(16, 32, 2).sets) == (2, 3)
    assert (plan(17, 32, 2).pack, plan(17, 32, 2).n_words, plan(17, 32, 2).sets) == (1, 1, 3)
    assert (plan(33, 32, 2).pack, plan(33, 32, 2).n_words, plan(33, 32, 2).sets) == (1, 2, 2)
    assert (plan(96, 32, 2).n_words, plan(96, 32, 2).sets) == (3, 1)
    assert plan(16, 32, 2).fold_steps(1000) == 2 + 1
    with pytest.raises(ValueError):
        plan(0, 32, 1)


def test_plan_of_one_input_row():
    p = plan(24, 32, 1)
    assert (p.pack, p.n_words, p.sets, p.split) == (1, 1, 3, 2)
    # K = 5: PE row 0 gets groups 0, 2, 4 (three sets), PE row 1 groups 1, 3 (two)
    assert p.sets_used(5) == [3, 2] and p.fold_steps(5) == 4
    assert p.sets_used(1) == [1, 0] and p.fold_steps(1) == 0
    # one-chunk groups pair once: (0, 1), (2, 3), ...; longer groups at every boundary
    assert [p.pairs_with_next(g) for g in range(4)] == [True, False, True, False]
    assert all(plan(100, 32, 1).pairs_with_next(g) for g in range(4))
    assert not any(plan(100, 32, 3).pairs_with_next(g) for g in range(4))
    assert plan(8, 32, 1).sets_used(4 * 7) == [3, 3]       # pack 4: 7 groups


def test_sums_in_fp32_not_fp16():
    # 2048 + 1 + 1 - 2048 with N = 96 (no packing, one set: plain order of k): every
    # partial sum is exact in FP32, so the result is 2; an FP16 accumulation would lose
    # the ones (2048 + 1 rounds to 2048 in FP16)
    # (two input rows: one row would spread its k-groups over two PE rows)
    x = f16([[2048, 1, 1, -2048]] * 2)
    w = np.zeros((4, 96), np.float16)
    w[:, 0] = 1
    assert golden.gemm(x, w, LANES)[0, 0] == 2
    # 1 + 2^-24 is a tie in FP32 and rounds back to 1 (even): added one by one, 2^14 such
    # products leave 1.0, while their exact sum, 1 + 2^-10, is an FP16 value of its own
    tiny = np.float16(2.0 ** -12)
    x = f16([[1] + [tiny] * (1 << 14)] * 2)
    w = np.zeros((x.shape[1], 96), np.float16)
    w[:, 0] = x[0]
    assert golden.gemm(x, w, LANES)[0, 0] == 1.0
    assert np.float16(1 + 2.0 ** -10) != 1.0


def test_interleaved_sets_change_the_rounding():
    # The same sum, 1 + 4095 x 2^-24, in FP32: with N = 96 (one set, order of k) every tiny
    # product ties and rounds back to 1; with N = 1 the column spreads over 3 sets x 32
    # packed rows, the tiny products meet each other first and survive the fold
    tiny = np.float16(2.0 ** -12)
    x = f16([[1] + [tiny] * 4095] * 2).astype(np.float32)     # two rows: no split
    wide = np.zeros((4096, 96), np.float32)
    wide[:, 0] = x[0]
    assert golden.gemm_fp32(x, wide, LANES)[0, 0] == 1.0
    folded = golden.gemm_fp32(x, x[:1].T.copy(), LANES)[0, 0]
    # only the ~43 products that share the 1's partial sum (k = 96 g) are lost
    assert 1 + 4000 * 2.0 ** -24 < float(folded) < 1 + 4095 * 2.0 ** -24
    # one input row, N = 96: the odd k go to PE row 1, where the tiny products meet each
    # other: 2048 x 2^-24 survives there, so the one-row sum differs from the two-row one
    assert golden.gemm_fp32(x[:1], wide, LANES)[0, 0] == np.float32(1 + 2048 * 2.0 ** -24)


def test_starts_from_positive_zero():
    assert golden.gemm(f16([[-0.0]]), f16([[1.0]]), LANES).view(np.uint16)[0, 0] == 0x0000


def test_overflow_and_nan():
    assert golden.gemm(f16([[300, 300]]), f16([[300], [0]]), LANES)[0, 0] == np.inf    # 90000 > 65504
    out = golden.gemm(f16([[0, 300]]), f16([[np.inf, 1], [300, 1]]), LANES)
    assert out.view(np.uint16)[0, 0] == golden.CANONICAL_NAN_FP16   # 0 * inf
    assert out[0, 1] == 300
    assert golden.gemv(f16([np.nan, 1]), f16([[1], [1]]), LANES).view(np.uint16)[0] == 0x7E00


def test_subnormal_result_kept():
    tiny = np.float16(2.0 ** -20)
    out = golden.gemm(f16([[tiny]]), f16([[2.0 ** -3]]), LANES)
    assert out[0, 0] == np.float16(2.0 ** -23)   # an FP16 subnormal, not flushed


def test_close_to_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 300)).astype(np.float16)
    w = (rng.standard_normal((300, 40)) / 17).astype(np.float16)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    assert np.max(np.abs(golden.gemm(x, w, LANES) - ref)) < 4e-3


def test_bad_arguments():
    with pytest.raises(TypeError, match="float16"):
        golden.gemm(np.ones((2, 2), np.float32), f16([[1, 1], [1, 1]]), LANES)
    with pytest.raises(ValueError, match="chain"):
        golden.gemm(f16([[1, 2]]), f16([[1, 2]]), LANES)


def plain_reference(x, w, lanes):
    """isa/pe_array.py's order, one scalar add at a time, no padding."""
    m_rows, k_dim = x.shape
    n_dim = w.shape[1]
    p = plan(n_dim, lanes, m_rows)
    out = np.zeros((m_rows, n_dim), np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        for m in range(m_rows):
            for n in range(n_dim):
                partial = np.zeros((p.split, p.sets, p.pack), np.float32)
                groups = -(-k_dim // p.pack)
                for g in range(groups):
                    q, s = g % p.split, (g // p.split) % p.sets
                    for r in range(p.pack):
                        k = g * p.pack + r
                        if k < k_dim:
                            product = np.float32(x[m, k]) * np.float32(w[k, n])
                            partial[q, s, r] = partial[q, s, r] + product
                t = partial[0, 0].copy()
                for q in range(p.split):
                    for s in range(p.sets):
                        if (q, s) != (0, 0):
                            t = t + partial[q, s]
                h = p.pack // 2
                while h:
                    t[:h] = t[:h] + t[h:2 * h]
                    h //= 2
                out[m, n] = np.float16(t[0])
    return golden.canonical_nan(out)


@pytest.mark.parametrize("m,k,n,lanes", [(1, 1, 1, 32), (1, 200, 8, 32), (3, 70, 5, 32), (2, 33, 40, 32),
                                         (2, 5, 70, 32), (1, 300, 1, 32), (4, 64, 16, 32), (2, 37, 3, 8),
                                         (1, 2, 1, 32), (2, 9, 100, 32), (1, 77, 24, 32), (1, 41, 100, 32),
                                         (1, 9, 12, 32), (1, 3, 40, 8), (1, 1, 24, 32)])
def test_vectorized_is_the_documented_order(m, k, n, lanes):
    rng = np.random.default_rng(m * k * n + lanes)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-8, 8, (m, k)))).astype(np.float16)
    w = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-8, 8, (k, n)))).astype(np.float16)
    x.reshape(-1)[::97] = -0.0
    if k * n > 200:
        w.reshape(-1)[::389] = np.inf
    assert np.array_equal(golden.gemm(x, w, lanes).view(np.uint16), plain_reference(x, w, lanes).view(np.uint16))


@pytest.mark.parametrize("m,k,n", [(1, 4096, 8), (3, 700, 5), (7, 33, 300), (2, 5, 2000), (1, 20000, 1)])
def test_compiled_sums_match_numpy_steps(m, k, n):
    """The compiled in-order sums (`_sequential_sums`) against numpy, one add per step,
    with infinities, NaNs, FP16 subnormals and -0 among the operands."""
    rng = np.random.default_rng(k)
    xs = rng.standard_normal((m, k // 4 + 1, 3)).astype(np.float16)
    ws = (rng.standard_normal((k // 4 + 1, 3, n)) * np.exp2(rng.integers(-20, 12, (k // 4 + 1, 3, n)))).astype(np.float16)
    xs.reshape(-1)[::7] = -0.0
    ws[1, 1, -1], ws[-1, 0, 0] = np.inf, np.nan
    xs, ws = xs.astype(np.float32), ws.astype(np.float32)
    compiled = golden._sequential_sums(xs, ws)
    looped = np.zeros_like(compiled)
    with np.errstate(invalid="ignore", over="ignore"):
        for c in range(xs.shape[1]):
            looped = looped + xs[:, c, :, None] * ws[None, c]
    # the same NaNs (their sign and payload depend on operand order in the machine code;
    # every result NaN is canonical on the device), every other sum bit for bit
    assert np.array_equal(np.isnan(compiled), np.isnan(looped))
    numbers = ~np.isnan(looped)
    assert np.isnan(looped).any() and numbers.any()
    assert np.array_equal(compiled[numbers].view(np.uint32), looped[numbers].view(np.uint32))


def test_negative_zero_products_sum_to_positive_zero():
    x, w = f16([[-0.0, 0.0, -0.0]]), f16([[1.0], [-1.0], [2.0]])
    assert golden.gemm(x, w, LANES).view(np.uint16)[0, 0] == 0x0000
    assert ACC_INTERLEAVE == 3


def test_widen_is_numpys_conversion():
    """golden.widen (a compiled table lookup) gives numpy's float16 -> float32 conversion for
    every bit pattern, NaN payloads included, in any array layout."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    assert np.array_equal(golden.widen(every).view(np.uint32), every.astype(np.float32).view(np.uint32))
    grid = every.reshape(256, 256)[::3, ::-2]
    assert np.array_equal(golden.widen(grid).view(np.uint32), grid.astype(np.float32).view(np.uint32))


def test_paged_attention_is_one_operand_whatever_the_pages():
    """A paged ATTENTION's partial depends on its tokens, not on where its pages break them:
    the same (O, m, l) for pages of 16, 64 or one page, and within 2e-3 of float64 attention
    once normalized; pages that do not pair raise."""
    rng = np.random.default_rng(25)
    q = (rng.standard_normal((3, 64)) / 8).astype(np.float16)
    k, v = (rng.standard_normal((150, 64)).astype(np.float16) for _ in range(2))
    results = []
    for page in (16, 64, 150):
        pages = [slice(i, i + page) for i in range(0, 150, page)]
        results.append(golden.attention_partial_paged(q, [k[p] for p in pages], [v[p] for p in pages], 32))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
    o, m, l = results[0]
    p = q.astype(np.float64) @ k.astype(np.float64).T
    w = np.exp(p - p.max(axis=1, keepdims=True))
    ref = (w / w.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    assert np.abs(o / l[:, None] - ref).max() < 2e-3
    with pytest.raises(ValueError, match="as many key pages as value pages"):
        golden.attention_partial_paged(q, [k[:16]], [], 32)

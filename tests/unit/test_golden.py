"""The golden model's documented arithmetic, checked on cases worked out by hand."""
import numpy as np
import pytest

from sim import golden


def f16(values):
    return np.array(values, dtype=np.float16)


def test_sums_in_order_of_k_in_fp32():
    # 2048 + 1 + 1 - 2048: in FP32 every partial sum is exact, so the result is 2,
    # which a pairwise or FP16 accumulation would not give (2048 + 1 rounds in FP16)
    x = f16([[2048, 1, 1, -2048]])
    w = f16([[1], [1], [1], [1]])
    assert golden.gemm(x, w)[0, 0] == 2
    # 1 + 2^-24 is a tie in FP32 and rounds back to 1 (even): added one by one, 2^14 such
    # products leave 1.0, while their exact sum, 1 + 2^-10, is an FP16 value of its own
    tiny = np.float16(2.0 ** -12)
    x = f16([[1] + [tiny] * (1 << 14)])
    w = x.T.copy()
    assert golden.gemm(x, w)[0, 0] == 1.0
    assert np.float16(1 + 2.0 ** -10) != 1.0


def test_starts_from_positive_zero():
    assert golden.gemm(f16([[-0.0]]), f16([[1.0]])).view(np.uint16)[0, 0] == 0x0000


def test_overflow_and_nan():
    assert golden.gemm(f16([[300, 300]]), f16([[300], [0]]))[0, 0] == np.inf    # 90000 > 65504
    out = golden.gemm(f16([[0, 300]]), f16([[np.inf, 1], [300, 1]]))
    assert out.view(np.uint16)[0, 0] == golden.CANONICAL_NAN_FP16   # 0 * inf
    assert out[0, 1] == 300
    assert golden.gemv(f16([np.nan, 1]), f16([[1], [1]])).view(np.uint16)[0] == 0x7E00


def test_subnormal_result_kept():
    tiny = np.float16(2.0 ** -20)
    out = golden.gemm(f16([[tiny]]), f16([[2.0 ** -3]]))
    assert out[0, 0] == np.float16(2.0 ** -23)   # an FP16 subnormal, not flushed


def test_close_to_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 300)).astype(np.float16)
    w = (rng.standard_normal((300, 40)) / 17).astype(np.float16)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    assert np.max(np.abs(golden.gemm(x, w) - ref)) < 4e-3


def test_bad_arguments():
    with pytest.raises(TypeError, match="float16"):
        golden.gemm(np.ones((2, 2), np.float32), f16([[1, 1], [1, 1]]))
    with pytest.raises(ValueError, match="chain"):
        golden.gemm(f16([[1, 2]]), f16([[1, 2]]))


def sequential_reference(x, w):
    """The documented order written as plainly as possible: one add per k, from +0."""
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(x.shape[1]):
            acc = acc + x[:, k:k + 1].astype(np.float32) * w[k:k + 1, :].astype(np.float32)
        return golden.canonical_nan(acc.astype(np.float16))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 4096, 8), (3, 700, 5), (7, 33, 300), (2, 5, 2000),
                                   (1, 20000, 1), (40, 64, 64)])
def test_blocked_accumulation_is_the_sequential_order(m, k, n):
    rng = np.random.default_rng(m * k * n)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-8, 8, (m, k)))).astype(np.float16)
    w = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-8, 8, (k, n)))).astype(np.float16)
    x.reshape(-1)[::97] = -0.0
    w.reshape(-1)[::89] = np.inf
    assert np.array_equal(golden.gemm(x, w).view(np.uint16), sequential_reference(x, w).view(np.uint16))


def test_negative_zero_products_sum_to_positive_zero():
    x, w = f16([[-0.0, 0.0, -0.0]]), f16([[1.0], [-1.0], [2.0]])
    assert golden.gemm(x, w).view(np.uint16)[0, 0] == 0x0000

"""Bit-exact numpy golden model of the compute unit's GEMV/GEMM (hw/compute_unit.py).

Accumulation order, as the PE array computes it:

    acc[m, n] = +0.0                                  (FP32)
    for k in 0 .. K-1:                                in order of k, one add per k
        acc[m, n] = fp32_add_rne(acc[m, n], fp32(X[m, k]) * fp32(W[k, n]))
    out[m, n] = fp16_rne(acc[m, n])

- The product of two FP16 values is exact in FP32 (11 x 11 significand bits, and the
  exponent range of FP16 products, subnormals included, lies inside FP32's normal range),
  so the only roundings are the FP32 adds and the final FP16 conversion, both RNE.
- FP16 subnormal inputs and outputs are kept (no flush to zero). The accumulator never
  holds an FP32 subnormal: every partial sum is a multiple of 2^-48.
- Overflow to FP16 gives +-inf. Every NaN result is the canonical FP16 NaN 0x7E00.

numpy's float32 multiply and add are IEEE binary32 with RNE, and its float32 -> float16
conversion rounds to nearest even, so this loop is the hardware's arithmetic exactly.
"""
import numpy as np

CANONICAL_NAN_FP16 = 0x7E00


def gemm(x, w):
    """out[M x N] = x[M x K] * w[K x N], all float16, accumulated as documented above."""
    x = np.asarray(x)
    w = np.asarray(w)
    if x.dtype != np.float16 or w.dtype != np.float16:
        raise TypeError(f"gemm takes float16 arrays, got {x.dtype!r} and {w.dtype!r}")
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"gemm shapes do not chain: {x.shape!r} x {w.shape!r}")
    return gemm_fp32(x.astype(np.float32), w.astype(np.float32))


BLOCK_ELEMS = 1 << 16       # products held at once when M x N is small
SMALL_OUTPUT = 128          # below this many outputs, one numpy call per k would cost most


def gemm_fp32(x32, w32):
    """The same, from the FP16 operands already widened to float32 (exactly).

    Large outputs: one in-place multiply and add per k. Small outputs: the products of a
    block of k's at once, summed with `np.add.accumulate`, which adds in order by
    definition (out[i] = out[i-1] + in[i], no pairwise regrouping) after the running sum;
    a leading +0 keeps the start of the sum at +0 (the first product may be -0)."""
    m, k = x32.shape
    n = w32.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):
        if m * n >= SMALL_OUTPUT:
            acc = np.zeros((m, n), dtype=np.float32)
            product = np.empty_like(acc)
            for i in range(k):
                np.multiply(x32[:, i:i + 1], w32[i:i + 1, :], out=product)   # exact
                np.add(acc, product, out=acc)                               # one RNE add per k
        else:
            block = BLOCK_ELEMS // (m * n)
            running = np.zeros((m, 1, n), dtype=np.float32)
            for k0 in range(0, k, block):
                products = x32[:, k0:k0 + block, None] * w32[None, k0:k0 + block, :]
                running = np.add.accumulate(np.concatenate([running, products], axis=1), axis=1)[:, -1:, :]
            acc = running[:, 0, :]
        out = acc.astype(np.float16)
    return canonical_nan(out)


def gemv(x, w):
    """out[N] = x[K] * w[K x N]."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"gemv takes a 1-D input, got shape {x.shape!r}")
    return gemm(x[None, :], w)[0]


def canonical_nan(a):
    """Replace every NaN of a float16 array by the canonical NaN the device writes."""
    bits = a.view(np.uint16).copy()
    bits[np.isnan(a)] = CANONICAL_NAN_FP16
    return bits.view(np.float16)

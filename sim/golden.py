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


def gemm_fp32(x32, w32):
    """The same, from the FP16 operands already widened to float32 (exactly)."""
    acc = np.zeros((x32.shape[0], w32.shape[1]), dtype=np.float32)
    product = np.empty_like(acc)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(x32.shape[1]):
            np.multiply(x32[:, k:k + 1], w32[k:k + 1, :], out=product)     # exact
            np.add(acc, product, out=acc)                                  # one RNE add per k
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

"""Bit-exact numpy golden model of the compute unit's GEMV/GEMM (hw/compute_unit.py).

Accumulation order: `isa/pe_array.py` defines it (row packing, interleaved partial sums,
k-groups over two PE rows for one input row, fold at readout); in short, for out[m, n]:

    partial[q, s, r] = +0.0                             (FP32; q < split, s < sets, r < pack)
    for g in 0 .. ceil(K / pack) - 1:                   k-groups, in order
        q = g mod split;  s = (g div split) mod sets    (split = 2 when M = 1, else 1;
                                                         1 for a decode step's S V, on PE row 1)
        for r < pack with k = g * pack + r < K:
            partial[q, s, r] = fp32_add_rne(partial[q, s, r], fp32(X[m, k]) * fp32(W[k, n]))
    t[r] = ((partial[0, 0, r] + partial[0, 1, r]) + ... + partial[1, 0, r] + ...)
                                                        PE row 0's sets, then row 1's, in order
    for h = pack/2, pack/4, .., 1:  t[r] = t[r] + t[r + h]  for r < h
    out[m, n] = fp16_rne(t[0])

- The product of two FP16 values is exact in FP32 (11 x 11 significand bits, and the
  exponent range of FP16 products, subnormals included, lies inside FP32's normal range),
  so the only roundings are the FP32 adds and the final FP16 conversion, both RNE.
- FP16 subnormal inputs and outputs are kept (no flush to zero). The accumulator never
  holds an FP32 subnormal: every partial sum is a multiple of 2^-48.
- Overflow to FP16 gives +-inf. Every NaN result is the canonical FP16 NaN 0x7E00.
- A partial sum started from +0 is never -0, so zero padding (products +0 * +0) adds
  exactly; the code below pads K freely.

numpy's (and numba's compiled) float32 multiply and add are IEEE binary32 with RNE, and
numpy's float32 -> float16 conversion rounds to nearest even, so this is the hardware's
arithmetic exactly. The long in-order sums run compiled (numba): one numpy call per step
would cost the model most of its time.
"""
import numba
import numpy as np

from isa import exp_approx as exp_constants
from isa.pe_array import plan as pe_plan, trans_plan

CANONICAL_NAN_FP16 = 0x7E00
# every FP16 bit pattern widened to float32 by numpy itself: a compiled lookup is the
# same conversion, several times faster than `astype` on large operands
_WIDENED = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


@numba.njit(cache=True)
def _lookup(bits, table):
    out = np.empty(bits.size, np.float32)
    for i in range(bits.size):
        out[i] = table[bits[i]]
    return out


def load_kernels():
    """Compile (or load from numba's cache) the compiled kernels for the types the model
    uses, so that the first descriptor does not pay for it."""
    bits = np.zeros(1, np.uint16)
    _lookup(bits, _WIDENED)
    bits.flags.writeable = False            # operands read in place from the model's memory
    _lookup(bits, _WIDENED)
    _sequential_sums(np.zeros((1, 1, 1), np.float32), np.zeros((1, 1, 1), np.float32))


def widen(a):
    """A float16 array widened to float32 (exact)."""
    a = np.ascontiguousarray(a, dtype=np.float16)
    return _lookup(a.view(np.uint16).reshape(-1), _WIDENED).reshape(a.shape)


def gemm(x, w, lanes):
    """out[M x N] = x[M x K] * w[K x N], all float16, accumulated as documented above
    for a PE array of `lanes` lanes."""
    x = np.asarray(x)
    w = np.asarray(w)
    if x.dtype != np.float16 or w.dtype != np.float16:
        raise TypeError(f"gemm takes float16 arrays, got {x.dtype!r} and {w.dtype!r}")
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"gemm shapes do not chain: {x.shape!r} x {w.shape!r}")
    return to_fp16(gemm_fp32(widen(x), widen(w), lanes))


def to_fp16(sums):
    """The FP32 sums rounded once to FP16 (RNE, overflow to infinity), canonical NaNs."""
    with np.errstate(over="ignore"):
        return canonical_nan(sums.astype(np.float16))


def gemm_fp32(x32, w32, lanes, split=None):
    """The FP32 sums (before the FP16 rounding), from the FP16 operands already widened to
    float32 (exactly). Returns float32 [M x N]. `split` False: one input row on one PE row
    (a decode step's S V, isa/pe_array.py Route.ROW1), in the order of a stage of several
    rows; None: the split for one input row."""
    if x32.dtype != np.float32 or w32.dtype != np.float32:
        raise TypeError(f"gemm_fp32 takes float32 arrays, got {x32.dtype!r} and {w32.dtype!r}")
    m, k = x32.shape
    n = w32.shape[1]
    p = pe_plan(n, lanes, m if split is None else (1 if split else 2))
    depth = p.split * p.sets * p.pack          # partial sums per output
    steps = -(-k // depth)
    pad = steps * depth - k
    if pad:
        x32 = np.concatenate([x32, np.zeros((m, pad), np.float32)], axis=1)
        w32 = np.concatenate([w32, np.zeros((pad, n), np.float32)], axis=0)
    # k = (c * sets * split + s * split + q) * pack + r  ->  step c, partial (s, q, r):
    # k-group g = k div pack goes to PE row q = g mod split, set s = (g div split) mod sets
    xs = x32.reshape(m, steps, depth)
    ws = w32.reshape(steps, depth, n)
    with np.errstate(over="ignore", invalid="ignore"):
        partial = _sequential_sums(xs, ws)                          # [m, depth, n]
        partial = partial.reshape(m, p.sets, p.split, p.pack, n)
        t = None
        for q in range(p.split):                                     # PE row 0's sets, then row 1's
            for s in range(p.sets):
                t = partial[:, s, q] if t is None else t + partial[:, s, q]
        h = p.pack // 2
        while h:
            t = t[:, :h] + t[:, h:2 * h]
            h //= 2
    return t[:, 0]


@numba.njit(cache=True)
def _sequential_sums(xs, ws):
    """acc[m, j, n] = sum over c, in order of c, of xs[m, c, j] * ws[c, j, n], starting from +0,
    one RNE add per c (compiled: IEEE binary32, no reassociation, no contraction)."""
    m, steps, depth = xs.shape
    n = ws.shape[2]
    acc = np.zeros((m, depth, n), np.float32)
    for i in range(m):
        for c in range(steps):
            for j in range(depth):
                x = xs[i, c, j]
                for t in range(n):
                    acc[i, j, t] += x * ws[c, j, t]
    return acc


def gemm_trans(x, s, lanes):
    """out[M x N] = x[M x K] * s^T, s stored N x K (TRANS_W), all float16, in the
    transposed order of isa/pe_array.py."""
    x, s = np.asarray(x), np.asarray(s)
    if x.dtype != np.float16 or s.dtype != np.float16:
        raise TypeError(f"gemm_trans takes float16 arrays, got {x.dtype!r} and {s.dtype!r}")
    if x.ndim != 2 or s.ndim != 2 or x.shape[1] != s.shape[1]:
        raise ValueError(f"gemm_trans shapes do not chain: {x.shape!r} x {s.shape!r}^T")
    return to_fp16(gemm_trans_fp32(widen(x), widen(s), lanes))


def _lane_tree(v):
    """The pairwise tree over the last axis (a power of two): (v[2i] + v[2i + 1]), RNE."""
    while v.shape[-1] > 1:
        v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0]


def gemm_trans_fp32(x32, s32, lanes):
    """The FP32 sums of a transposed stage: x32 [M x K], s32 [N x K] float32 (widened FP16).
    Returns float32 [M x N]."""
    m, k = x32.shape
    p = trans_plan(k, lanes)
    with np.errstate(over="ignore", invalid="ignore"):
        products = x32[:, None, :] * s32[None, :, :]                  # [M, N, K], exact
        if p.chunks == 1:
            width = 1 << p.level                                       # K, or LANES past a row's K
            products = np.concatenate([products, np.zeros((*products.shape[:2], width - k), np.float32)],
                                      axis=2)
            return _lane_tree(products)
        pad = p.chunks * lanes - k
        products = np.concatenate([products, np.zeros((*products.shape[:2], pad), np.float32)], axis=2)
        t = _lane_tree(products.reshape(*products.shape[:2], p.chunks, lanes))     # [M, N, chunks]
        sets = []
        for i in range(min(p.chunks, p.sets)):
            acc = np.zeros(t.shape[:2], np.float32)                    # each set from +0
            for c in range(i, p.chunks, p.sets):
                acc = acc + t[..., c]
            sets.append(acc)
        out = sets[0]
        for extra in sets[1:]:
            out = out + extra
        return out


def gemv(x, w, lanes):
    """out[N] = x[K] * w[K x N]."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"gemv takes a 1-D input, got shape {x.shape!r}")
    return gemm(x[None, :], w, lanes)[0]


def canonical_nan(a):
    """Replace every NaN of a float16 array by the canonical NaN the device writes."""
    bits = a.view(np.uint16).copy()
    bits[np.isnan(a)] = CANONICAL_NAN_FP16
    return bits.view(np.float16)


# ==== softmax (hw/softmax_unit.py) ========================================================
"""Bit-exact model of the softmax special-function unit, one row per array row.

For a row x[0 .. n-1] (FP32), with L = lanes (the device's LANES):

1. m = max(x) in the total order with -0 < +0; any NaN makes m the canonical NaN.
2. d = fp32_add_rne(x, -m)   (inf - inf = NaN, and so on)
3. e = exp_approx(d)         (fixed point, below; d <= 0 always, as x <= m)
4. l = the FP32 RNE sum of e in this order: lane j = k mod L of word w = k div L keeps
   three partial sums p[j][0..2], each from +0; element k is added to p[j][w mod 3],
   in order of w. Then t_j = (p[j][0] + p[j][1]) + p[j][2], then for h = L/2, L/4 .. 1:
   t_j = t_j + t_{j+h} for j < h; l = t_0. (Lanes and sets with no element hold +0.)
5. normalized: r = fp32_rne(1 / l); out = fp16_rne(e * r), the 48-bit product exact and
   rounded once. partial: out = fp16_rne(e).
Every NaN is canonical (FP32 0x7FC00000, FP16 0x7E00). An empty row gives m = -inf,
l = +0 and no output.

numpy's float32 add and divide are IEEE RNE; the float32 x float32 product is exact in
float64 and numpy rounds float64 -> float16 once (tests/unit/test_softmax.py checks this on
ties); `np.add.accumulate` adds in order, so this is the unit's arithmetic exactly.
"""

SOFTMAX_LANES = 8                        # the default config's softmax_lanes
F32_QNAN = 0x7FC00000
EXP_LOG2E_Q = exp_constants.LOG2E_Q                     # round(log2(e) * 2^30)
EXP_TAB = np.array(exp_constants.EXP_TAB, dtype=np.int64)  # round(2^(k/64) * 2^23), k = 0..64
EXP_MIN = np.float32(exp_constants.EXP_MIN)


def exp_approx(d):
    """e = exp(d) for FP32 d <= 0 (or NaN), the unit's fixed-point approximation:

        D = trunc(d * 2^24)             (|D| < 2^31)
        T = (D * EXP_LOG2E_Q) >> 30     (floor)
        i = T >> 24, f = T mod 2^24, idx = f >> 18, frac = f mod 2^18
        y = TAB[idx] + (((TAB[idx+1] - TAB[idx]) * frac) >> 18),  TAB[k] = round(2^(k/64) 2^23)
        e = FP32(exponent field 127 + i, fraction y - 2^23), +0 when 127 + i <= 0
    NaN -> canonical NaN; d < -104 (-inf included) -> +0. d = +-0 gives exactly 1.0.
    Error: the linear interpolation of 2^x on steps of 1/64 is within
    (1/64)^2 / 8 * ln(2)^2 = 1.47e-5 relative, the truncations add about 2e-7; measured
    over d in [-87.33, 0] (normal results), tests/unit/test_softmax.py: max 1.472e-5."""
    d = np.asarray(d, dtype=np.float32)
    nan = np.isnan(d)
    if np.any(d > 0):
        raise ValueError("exp_approx takes d <= 0 (the unit computes x - max(x))")
    small = d < EXP_MIN
    dd = np.where(nan | small, np.float32(0), d).astype(np.float64)
    big_d = np.trunc(dd * 2.0**24).astype(np.int64)
    t = (big_d * EXP_LOG2E_Q) >> 30
    f = t & ((1 << 24) - 1)
    idx, frac = f >> 18, f & ((1 << 18) - 1)
    y = EXP_TAB[idx] + (((EXP_TAB[idx + 1] - EXP_TAB[idx]) * frac) >> 18)
    biased = (t >> 24) + 127
    bits = np.where(biased <= 0, 0, (biased << 23) | (y - (1 << 23)))
    bits = np.where(small, 0, np.where(nan, F32_QNAN, bits))
    return bits.astype(np.uint32).view(np.float32)


def _fp32_canonical(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).copy()
    bits[np.isnan(a)] = F32_QNAN
    return bits.view(np.float32)


def softmax_row_max(x32):
    """m per row: total order -0 < +0, canonical NaN if the row has one; -inf if empty."""
    bits = x32.view(np.uint32)
    nan = np.isnan(x32)
    keys = np.where(bits >> 31 == 1, ~bits, bits | np.uint32(0x80000000)).astype(np.uint32)
    keys[nan] = 0
    if x32.shape[1] == 0:
        return np.full(x32.shape[0], -np.inf, dtype=np.float32)
    k = keys.max(axis=1)
    m = np.where(k >> 31 == 1, k & np.uint32(0x7FFFFFFF), ~k).astype(np.uint32)
    m[nan.any(axis=1)] = F32_QNAN
    return m.view(np.float32)


def softmax_row_sum(e, lanes=SOFTMAX_LANES):
    """l per row: the FP32 sum of e [rows x n] in the unit's order (see above)."""
    rows, n = e.shape
    words = -(-n // lanes)
    groups = -(-words // 3)
    # +0 padding adds exactly (every e is +0, positive or NaN), so it stands for "not added"
    padded = np.zeros((rows, groups * 3 * lanes), dtype=np.float32)
    padded[:, :n] = e
    parts = padded.reshape(rows, groups, 3, lanes)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.add.accumulate(parts, axis=1)[:, -1] if groups else np.zeros((rows, 3, lanes), np.float32)
        t = (p[:, 0] + p[:, 1]) + p[:, 2]
        h = lanes // 2
        while h >= 1:
            t[:, :h] = t[:, :h] + t[:, h:2 * h]
            h //= 2
    return _fp32_canonical(t[:, 0])


def softmax_rows(x32, partial=False, lanes=SOFTMAX_LANES):
    """(out float16 [rows x n], m float32 [rows], l float32 [rows]) of x32 [rows x n], as
    the unit with `lanes` lanes computes them (see above)."""
    x32 = np.asarray(x32, dtype=np.float32)
    if x32.ndim != 2:
        raise ValueError(f"softmax_rows takes a 2-D array, got shape {x32.shape!r}")
    m = softmax_row_max(x32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d = x32 + (-m)[:, None]
        e = exp_approx(d)
        l = softmax_row_sum(e, lanes)
        if partial:
            out = e.astype(np.float16)
        else:
            r = np.float32(1) / l
            out = (e.astype(np.float64) * r.astype(np.float64)[:, None]).astype(np.float16)
    return canonical_nan(out), m, l


# ==== chains on the device (hw/control_unit.py) ==============================================

def lora_xab(x, a, b, lanes):
    """LoRA E3 on the device: y = fp16(x A) B, the intermediate rounded to FP16 once (it
    feeds the second product from the input buffer). x [M x D], a [D x R], b [R x D]."""
    return gemm(gemm(x, a, lanes), b, lanes)


def attention_partial_trans(q, k, v, lanes, softmax_lanes=None):
    """attention_partial with the keys stored token-major (TRANS_W: k [T x d], like v):
    P = q K^T as a transposed stage (isa/pe_array.py), then as attention_partial."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        if np.asarray(a).dtype != np.float16:
            raise TypeError(f"attention_partial_trans takes float16 arrays, {name} is {np.asarray(a).dtype!r}")
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.shape[1] != k.shape[1] or k.shape != v.shape:
        raise ValueError(f"attention shapes do not chain: q {q.shape!r}, K {k.shape!r}, V {v.shape!r}")
    return attention_fp32(widen(q), widen(k), widen(v), lanes, token_major=True, softmax_lanes=softmax_lanes)


def attention_partial_kv(q, k, v, lanes, token_major, softmax_lanes=None):
    """What the device returns for one KV head whose keys and values are k and v (T x d):
    the keys stored token-major (TRANS_W, attention_partial_trans) or as K^T
    (attention_partial)."""
    if token_major:
        return attention_partial_trans(q, k, v, lanes, softmax_lanes)
    return attention_partial(q, np.ascontiguousarray(np.asarray(k).T), v, lanes, softmax_lanes)


def attention_partial_paged(q, k_pages, v_pages, lanes, softmax_lanes=None):
    """A paged ATTENTION (docs/read-compute-project.md): its pages' tokens, K and V token-major
    ([t_p x d] each, in list order), are one operand's, so the result is
    attention_partial_trans of their concatenation: one (O, m, l) for the whole share."""
    if len(k_pages) != len(v_pages) or not k_pages:
        raise ValueError(f"a paged attention needs as many key pages as value pages, at least one: "
                         f"{len(k_pages)} and {len(v_pages)}")
    return attention_partial_trans(q, np.concatenate(k_pages), np.concatenate(v_pages), lanes, softmax_lanes)


def attention_fp32(q32, k32, v32, lanes, token_major, softmax_lanes=None):
    """attention_partial (k32 = K^T, d x T) or, `token_major`, attention_partial_trans
    (k32 = K, T x d), from the FP16 operands already widened to float32 (exactly)."""
    scores = (gemm_trans_fp32 if token_major else gemm_fp32)(q32, k32, lanes)
    s, m, l = softmax_rows(_fp32_canonical(scores), partial=True, lanes=softmax_lanes or lanes)
    # a decode step's S V (one query row, keys token-major) runs on PE row 1 alone
    # (isa/validate.py decode_attention): no split
    out = gemm_fp32(widen(s), v32, lanes, split=False if token_major and len(q32) == 1 else None)
    return _fp32_canonical(out), m, l


def attention_partial(q, k_t, v, lanes, softmax_lanes=None):
    """Integral attention for one KV head on one device's tokens, as the device computes it:

        P = q K^T           FP32 sums (isa/pe_array.py order), not rounded
        S, m, l = softmax_rows(P, partial=True)     S = FP16(exp(P - m))
        O = S V             FP32 sums, not rounded

    q [M x d] (already scaled by 1/sqrt(d) by the driver), k_t = K^T [d x T], v [T x d],
    all float16; `lanes` the PE array's, `softmax_lanes` the softmax unit's (cfg.softmax_lanes;
    None: `lanes`). Returns (O float32 [M x d], m float32 [M], l float32 [M]); every NaN is
    the canonical FP32 NaN."""
    for name, a in (("q", q), ("k_t", k_t), ("v", v)):
        if np.asarray(a).dtype != np.float16:
            raise TypeError(f"attention_partial takes float16 arrays, {name} is {np.asarray(a).dtype!r}")
    q, k_t, v = (np.asarray(a) for a in (q, k_t, v))
    if q.shape[1] != k_t.shape[0] or k_t.shape[1] != v.shape[0] or v.shape[1] != k_t.shape[0]:
        raise ValueError(f"attention shapes do not chain: q {q.shape!r}, K^T {k_t.shape!r}, V {v.shape!r}")
    return attention_fp32(widen(q), widen(k_t), widen(v), lanes, token_major=False, softmax_lanes=softmax_lanes)

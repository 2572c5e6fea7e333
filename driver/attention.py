"""Host-side attention math for split-KV decode (PLoRA section V-B), pure numpy.

Each device holds a share of one KV head's T tokens and computes "integral attention"
on it: P = q . K^T (q already scaled by 1/sqrt(d) by the driver, `scale_query`), a partial
softmax anchored at m = max_t P_t, and the UNnormalized O = sum_t exp(P_t - m) V_t with
l = sum_t exp(P_t - m). It returns (o, m, l) per query row, all FP32. The host merges the
devices' partials exactly (`merge_attention`):

    M = max_i m_i,   l = sum_i l_i exp(m_i - M),   out = sum_i o_i exp(m_i - M) / l

A device holding no tokens contributes None, or m = -inf with l = 0 (and o = 0).

`partial_attention_reference` is what one device should return for its shard and
`attention_reference` the unsplit result; both compute in float64 from the float16
inputs. `kv_operand_bytes` lays out one KV head's shard in HDM for the device op.
"""
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from isa.encoders import FP16
from isa.errors import ArgumentError, ShapeError, count_arg
from isa.slots import LINE_BYTES
from isa.validate import lines

F16 = npt.NDArray[np.float16]
F32 = npt.NDArray[np.float32]
Partial = tuple[F32, F32, F32]          # one device's (o, m, l)

# ---- argument checks --------------------------------------------------------------------

def _fp16_matrix(array: Any, name: str, allow_empty_rows: bool = False) -> F16:
    """A 2-D float16 numpy array; zero rows only where allowed, never zero columns."""
    if not isinstance(array, np.ndarray):
        raise ArgumentError(f"{name} must be a numpy array, got {type(array).__name__!r}")
    if array.dtype != np.float16:
        raise ArgumentError(f"{name} must be float16, got dtype {str(array.dtype)!r}")
    if array.ndim != 2:
        raise ShapeError(f"{name} must have 2 dimensions, got shape {array.shape!r}")
    if array.shape[1] == 0 or (array.shape[0] == 0 and not allow_empty_rows):
        raise ShapeError(f"{name} has an empty dimension: shape {array.shape!r}")
    return array


def _qkv(q: F16, k: F16, v: F16, allow_no_tokens: bool) -> tuple[F16, F16, F16]:
    """Checks q (rows, d), k (T, d), v (T, d), all float16; returns (q, k, v)."""
    q = _fp16_matrix(q, "q")
    k = _fp16_matrix(k, "k", allow_empty_rows=allow_no_tokens)
    v = _fp16_matrix(v, "v", allow_empty_rows=allow_no_tokens)
    if k.shape != v.shape:
        raise ShapeError(f"k and v must have the same shape (T, d), got {k.shape!r} and {v.shape!r}")
    if k.shape[1] != q.shape[1]:
        raise ShapeError(f"q and k must have the same head dimension d, got q {q.shape!r} "
                         f"and k {k.shape!r}")
    return q, k, v


# ---- references ---------------------------------------------------------------------------

def scale_query(q: F16) -> F16:
    """The driver's prescaling: float16(q / sqrt(d)), computed in float64, rounded once."""
    q = _fp16_matrix(q, "q")
    return (q.astype(np.float64) / math.sqrt(q.shape[1])).astype(np.float16)


def attention_reference(q: F16, k: F16, v: F16) -> npt.NDArray[np.float64]:
    """softmax(q k^T / sqrt(d)) v in float64 on the float16 inputs (q NOT prescaled).

    q (rows, d), k and v (T, d) with T >= 1; returns (rows, d) float64.
    """
    q, k, v = _qkv(q, k, v, allow_no_tokens=False)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    p = q64 @ k64.T / math.sqrt(q.shape[1])
    e = np.exp(p - p.max(axis=1, keepdims=True))
    return (e @ v64) / e.sum(axis=1, keepdims=True)


def partial_attention_reference(q: F16, k: F16, v: F16) -> Partial | None:
    """What one device returns for its shard: (o, m, l), float32, or None when T = 0.

    q (rows, d) is the prescaled query (`scale_query`), k and v (T, d) the shard's keys
    and values, all float16. Computed in float64: P = q k^T, m = max_t P_t,
    l = sum_t exp(P_t - m), o = sum_t exp(P_t - m) v_t (unnormalized); each rounded once
    to float32.
    """
    q, k, v = _qkv(q, k, v, allow_no_tokens=True)
    if k.shape[0] == 0:
        return None
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    p = q64 @ k64.T
    m = p.max(axis=1)
    e = np.exp(p - m[:, None])
    return ((e @ v64).astype(np.float32), m.astype(np.float32),
            e.sum(axis=1).astype(np.float32))


# ---- the host merge ---------------------------------------------------------------------

def _partial(index: int, partial: Any) -> tuple[npt.NDArray[np.float64], ...]:
    """One device's (o, m, l) as float64 arrays, shapes checked against each other."""
    if not isinstance(partial, (tuple, list)) or len(partial) != 3:
        raise ArgumentError(f"partial {index} must be None or a tuple (o, m, l), "
                            f"got {type(partial).__name__!r}")
    arrays = []
    for name, array in zip("oml", partial, strict=True):
        array = np.asarray(array)
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise ArgumentError(f"partial {index}: {name} must be real numbers, got dtype "
                                f"{str(array.dtype)!r}")
        arrays.append(array.astype(np.float64))
    o, m, l = arrays                            # noqa: E741 (the merge's o, m, l)
    if o.ndim != 2 or m.ndim != 1 or l.ndim != 1 or not (o.shape[0] == m.shape[0] == l.shape[0]):
        raise ShapeError(f"partial {index}: o must be (rows, d) and m, l (rows,), got o "
                         f"{o.shape!r}, m {m.shape!r}, l {l.shape!r}")
    if 0 in o.shape:
        raise ShapeError(f"partial {index}: o has an empty dimension: shape {o.shape!r}")
    empty = (m == -np.inf) & (l != 0)
    if empty.any():
        rows = np.flatnonzero(empty).tolist()
        raise ArgumentError(f"partial {index}: m = -inf (no tokens) but l != 0 in rows {rows!r}")
    held = np.isfinite(m) & (l <= 0)
    if held.any():
        rows = np.flatnonzero(held).tolist()
        raise ArgumentError(f"partial {index}: finite m (tokens held) but l <= 0 in rows {rows!r}")
    return o, m, l


def merge_attention(partials: Sequence[Partial | None]) -> F32:
    """The exact attention output (rows, d) float32 from the devices' partials.

    `partials`: one entry per device, None (zero tokens) or (o, m, l) with o (rows, d) and
    m, l (rows,). Merged in float64; a NaN in any partial comes out as NaN. ValueError
    (ArgumentError/ShapeError) on disagreeing shapes, or when some row has no token on
    any device.
    """
    try:
        partials = list(partials)
    except TypeError:
        raise ArgumentError(f"partials must be a sequence, got {type(partials).__name__!r}") from None
    if not partials:
        raise ArgumentError("partials is empty: no device given")
    held = [(i, _partial(i, p)) for i, p in enumerate(partials) if p is not None]
    if not held:
        raise ArgumentError(f"all {len(partials)} partials are None: no device holds any token")
    shape = held[0][1][0].shape
    for i, (o, _, _) in held:
        if o.shape != shape:
            raise ShapeError(f"partial {i}: o has shape {o.shape!r}, partial {held[0][0]} "
                             f"has {shape!r}")
    o = np.stack([p[0] for _, p in held])       # (devices, rows, d)
    m = np.stack([p[1] for _, p in held])       # (devices, rows)
    l = np.stack([p[2] for _, p in held])       # noqa: E741
    anchor = m.max(axis=0)                      # NaN in any m gives NaN
    if (anchor == -np.inf).any():
        rows = np.flatnonzero(anchor == -np.inf).tolist()
        raise ArgumentError(f"rows {rows!r} have no token on any device (m = -inf everywhere)")
    with np.errstate(invalid="ignore"):         # inf - inf: NaN, propagated on purpose
        w = np.exp(m - anchor)                  # 0 for empty devices (m = -inf)
    # An empty device's o is 0 and its weight 0: it adds nothing (a NaN in it still shows).
    with np.errstate(invalid="ignore", divide="ignore"):
        total = (l * w).sum(axis=0)
        out = (o * w[:, :, None]).sum(axis=0) / total[:, None]
    return out.astype(np.float32)


# ---- token split --------------------------------------------------------------------------

def split_tokens(total: int, devices: int, rng: np.random.Generator | int | None = None) -> list[int]:
    """Token counts (list, sum `total`) for `devices` devices.

    Without rng: as even as possible, earlier devices get the extra token. With rng (a
    numpy Generator, or a seed for np.random.default_rng): a random uneven split in which
    each device is, at random, empty, given one token, or given a random share of the rest.
    """
    total = count_arg(total, "total", 0)
    devices = count_arg(devices, "devices", 1)
    if rng is None:
        base, extra = divmod(total, devices)
        return [base + (i < extra) for i in range(devices)]
    rng = np.random.default_rng(rng)
    kind = rng.integers(0, 3, size=devices)     # 0: empty, 1: one token, 2: a random share
    if not (kind == 2).any():
        kind[rng.integers(devices)] = 2
    ones = np.flatnonzero(kind == 1)
    if len(ones) > total:                       # not enough tokens for every one-token device
        kind[rng.choice(ones, size=len(ones) - total, replace=False)] = 0
    counts = np.where(kind == 1, 1, 0)
    shares = np.flatnonzero(kind == 2)
    rest = total - int(counts.sum())
    cuts = np.sort(rng.integers(0, rest + 1, size=len(shares) - 1))
    counts[shares] = np.diff(np.concatenate(([0], cuts, [rest])))
    return [int(c) for c in counts]


# ---- the KV operand in HDM --------------------------------------------------------------

def kv_v_offset(d: int, t: int) -> int:
    """Byte offset of V in the operand: K (T x d or d x T FP16) rounded up to whole 64-byte lines."""
    d, t = count_arg(d, "d", 1), count_arg(t, "t", 1)
    return lines(d * t * 2) * LINE_BYTES


def kv_operand_lines(d: int, t: int) -> int:
    """Size of one KV head's operand in 64-byte lines: K's lines plus V's lines."""
    d, t = count_arg(d, "d", 1), count_arg(t, "t", 1)
    return lines(d * t * 2) + lines(t * d * 2)


def kv_operand_bytes(k: F16, v: F16, token_major: bool = True) -> bytes:
    """The device operand of one KV head: K FP16 row-major, token-major (T x d, a token per
    row: the descriptor's TRANS_W, dev_rows = T, dev_cols = d) or with token_major False
    transposed (K^T, d x T: dev_rows = d, dev_cols = T), zeros up to the next 64-byte
    boundary, then V (T x d) FP16 row-major, zeros up to the next 64-byte boundary. k and v
    are (T, d) float16 with T, d >= 1.
    """
    k = _fp16_matrix(k, "k")
    v = _fp16_matrix(v, "v")
    if k.shape != v.shape:
        raise ShapeError(f"k and v must have the same shape (T, d), got {k.shape!r} and {v.shape!r}")
    t, d = k.shape
    kt = np.ascontiguousarray(k if token_major else k.T, dtype=FP16).tobytes()
    vb = np.ascontiguousarray(v, dtype=FP16).tobytes()
    offset = kv_v_offset(d, t)
    data = kt + bytes(offset - len(kt)) + vb
    return data + bytes(kv_operand_lines(d, t) * LINE_BYTES - len(data))


# ---- GQA / MHA ------------------------------------------------------------------------------

def query_groups(num_q_heads: int, num_kv_heads: int) -> list[list[int]]:
    """For each KV head, the indices of the query heads sharing it (consecutive heads)."""
    num_q_heads = count_arg(num_q_heads, "num_q_heads", 1)
    num_kv_heads = count_arg(num_kv_heads, "num_kv_heads", 1)
    if num_q_heads % num_kv_heads:
        raise ArgumentError(f"num_q_heads {num_q_heads!r} is not a multiple of "
                            f"num_kv_heads {num_kv_heads!r}")
    group = num_q_heads // num_kv_heads
    return [list(range(h * group, (h + 1) * group)) for h in range(num_kv_heads)]

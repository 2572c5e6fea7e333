"""Host-side split-KV attention math (driver.attention): merge, references, token split,
the KV operand layout in HDM and GQA grouping. Pure numpy, no device.

The split/merge tests stand in for the devices with `device_partial`, which rounds the
way the device will: scores and the anchor m in FP32, e = exp(P - m) rounded to FP16
before the S.V product (the PE array multiplies FP16), l, o in FP32. Run with -s to see
the worst merge error measured.
"""
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from driver.attention import (attention_reference, kv_operand_bytes, kv_operand_lines,
                              kv_v_offset, merge_attention, partial_attention_reference,
                              query_groups, scale_query, split_tokens)
from isa.errors import ArgumentError, ShapeError

TOLERANCE = 2e-3                 # max abs error of the merged output against float64
WORST = {"error": 0.0, "case": None}


def device_partial(q_scaled, k, v):
    """One device's (o, m, l) for its shard, rounded as the device rounds; None if T = 0."""
    if k.shape[0] == 0:
        return None
    p = (q_scaled.astype(np.float64) @ k.astype(np.float64).T).astype(np.float32)
    m = p.max(axis=1)
    e = np.exp(p.astype(np.float64) - m[:, None].astype(np.float64))
    l = e.sum(axis=1).astype(np.float32)
    e16 = e.astype(np.float16)
    o = (e16.astype(np.float64) @ v.astype(np.float64)).astype(np.float32)
    return o, m, l


def random_qkv(rng, rows, total, d):
    q, k, v = (rng.standard_normal(shape).astype(np.float16)
               for shape in ((rows, d), (total, d), (total, d)))
    return q, k, v


def split_merge_error(q, k, v, counts, case):
    """Merged split-KV output against the float64 reference; records the worst error."""
    assert sum(counts) == k.shape[0]
    qs = scale_query(q)
    bounds = np.cumsum([0] + list(counts))
    partials = [device_partial(qs, k[a:b], v[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    out = merge_attention(partials)
    assert out.dtype == np.float32 and out.shape == q.shape
    error = float(np.abs(out.astype(np.float64) - attention_reference(q, k, v)).max())
    if error > WORST["error"]:
        WORST.update(error=error, case=case)
    return error


# ---- split and merge against the reference ----------------------------------------------

@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("total", [1, 2, 7, 300, 2048])
@pytest.mark.parametrize("devices", [1, 2, 3, 8])
@pytest.mark.parametrize("uneven", [False, True])
def test_split_merge_matches_reference(d, total, devices, uneven):
    rng = np.random.default_rng([d, total, devices, uneven])
    rows = int(rng.integers(1, 9))
    q, k, v = random_qkv(rng, rows, total, d)
    counts = split_tokens(total, devices, rng if uneven else None)
    error = split_merge_error(q, k, v, counts, (d, rows, total, counts))
    assert error <= TOLERANCE, (counts, error)


@pytest.mark.parametrize("counts", [[0, 1, 0, 299], [1, 1, 0, 5], [0, 0, 7, 0, 0],
                                    [1, 0, 1, 0, 1, 0, 1, 2044], [2048, 0]])
@pytest.mark.parametrize("d", [64, 128])
def test_split_merge_with_empty_and_one_token_devices(counts, d):
    rng = np.random.default_rng([d, *counts])
    q, k, v = random_qkv(rng, 8, sum(counts), d)
    error = split_merge_error(q, k, v, counts, (d, 8, sum(counts), counts))
    assert error <= TOLERANCE, (counts, error)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(d=st.sampled_from([64, 128]), rows=st.integers(1, 8),
       total=st.one_of(st.integers(1, 16), st.integers(17, 2048)),
       devices=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_split_merge_property(d, rows, total, devices, seed):
    rng = np.random.default_rng(seed)
    q, k, v = random_qkv(rng, rows, total, d)
    counts = split_tokens(total, devices, rng)
    error = split_merge_error(q, k, v, counts, (d, rows, total, counts))
    assert error <= TOLERANCE, (counts, error)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(d=st.sampled_from([64, 128]), rows=st.integers(1, 8), total=st.integers(1, 300),
       devices=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_merge_of_exact_partials_is_exact(d, rows, total, devices, seed):
    """float64 partials (no FP16 rounding of e) merge to the reference within float32."""
    rng = np.random.default_rng(seed)
    q, k, v = random_qkv(rng, rows, total, d)
    counts = split_tokens(total, devices, rng)
    bounds = np.cumsum([0] + counts)
    qs = scale_query(q)
    partials = [partial_attention_reference(qs, k[a:b], v[a:b])
                for a, b in zip(bounds[:-1], bounds[1:])]
    whole = partial_attention_reference(qs, k, v)
    expected = whole[0].astype(np.float64) / whole[2][:, None]
    np.testing.assert_allclose(merge_attention(partials), expected, rtol=1e-5, atol=1e-5)


def test_worst_merge_error_reported():
    """Runs after the split/merge tests above (file order): prints the worst error."""
    assert WORST["case"] is not None
    print(f"\nworst split-KV merge error: {WORST['error']:.3e} (max abs; tolerance "
          f"{TOLERANCE:g}) at (d, rows, total, counts) = {WORST['case']}")
    assert WORST["error"] <= TOLERANCE


# ---- merge: single device, empty devices, errors, NaN -----------------------------------

def small_partial(rows=3, total=5, d=64, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = random_qkv(rng, rows, total, d)
    return partial_attention_reference(scale_query(q), k, v)


def empty_partial(rows=3, d=64):
    return (np.zeros((rows, d), np.float32), np.full(rows, -np.inf, np.float32),
            np.zeros(rows, np.float32))


def test_single_device_merge_is_the_normalized_partial():
    o, m, l = small_partial()
    expected = (o.astype(np.float64) / l.astype(np.float64)[:, None]).astype(np.float32)
    np.testing.assert_array_equal(merge_attention([(o, m, l)]), expected)
    np.testing.assert_array_equal(merge_attention([None, (o, m, l), None]), expected)
    np.testing.assert_array_equal(merge_attention([empty_partial(), (o, m, l)]), expected)


def test_single_device_merge_matches_reference():
    rng = np.random.default_rng(7)
    q, k, v = random_qkv(rng, 4, 300, 128)
    out = merge_attention([partial_attention_reference(scale_query(q), k, v)])
    assert np.abs(out - attention_reference(q, k, v)).max() <= TOLERANCE


def test_merge_result_is_float32_and_partials_may_be_lists():
    o, m, l = small_partial()
    out = merge_attention(iter([[o, m, l], None]))
    assert out.dtype == np.float32 and out.shape == o.shape


@pytest.mark.parametrize("partials", [[], [None], [None, None, None], [empty_partial()],
                                      [None, empty_partial(), empty_partial()]])
def test_merge_all_empty_raises(partials):
    with pytest.raises(ValueError, match="no device|no token"):
        merge_attention(partials)


def test_merge_row_empty_on_every_device_raises_naming_the_row():
    o, m, l = small_partial()
    m, l = m.copy(), l.copy()
    o = o.copy()
    o[1], m[1], l[1] = 0, -np.inf, 0
    with pytest.raises(ArgumentError, match=r"rows \[1\]"):
        merge_attention([(o, m, l), empty_partial()])
    # the same row held by another device merges fine
    assert np.isfinite(merge_attention([(o, m, l), small_partial(seed=1)])).all()


def test_merge_inconsistent_empty_row_raises():
    o, m, l = small_partial()
    with pytest.raises(ArgumentError, match="l != 0"):
        merge_attention([(o, np.full(3, -np.inf, np.float32), l)])
    with pytest.raises(ArgumentError, match="l <= 0"):
        merge_attention([(o, m, np.zeros(3, np.float32))])


@pytest.mark.parametrize("bad", [
    lambda o, m, l: [(o, m, l), (o[:, :32], m, l)],           # d differs between devices
    lambda o, m, l: [(o, m, l), (o[:2], m[:2], l[:2])],       # rows differ
    lambda o, m, l: [(o, m[:2], l)],                          # m too short
    lambda o, m, l: [(o, m, l[:, None])],                     # l 2-D
    lambda o, m, l: [(o[0], m, l)],                           # o 1-D
    lambda o, m, l: [(o[:, :0], m, l)],                       # d = 0
])
def test_merge_shape_mismatch_raises_naming_shapes(bad):
    o, m, l = small_partial()
    with pytest.raises(ShapeError, match=r"\(\d+, \d+\)|\(\d*,\)"):
        merge_attention(bad(o, m, l))


def test_merge_malformed_partial_raises():
    o, m, l = small_partial()
    with pytest.raises(ArgumentError):
        merge_attention([(o, m)])
    with pytest.raises(ArgumentError):
        merge_attention([(o.astype(complex), m, l)])
    with pytest.raises(ArgumentError):
        merge_attention(5)


@pytest.mark.parametrize("where", ["o", "m", "l"])
def test_merge_nan_propagates(where):
    o, m, l = (a.copy() for a in small_partial())
    other = small_partial(seed=1)
    {"o": o[1], "m": m[1:2], "l": l[1:2]}[where][0] = np.nan
    out = merge_attention([other, (o, m, l)])
    assert np.isnan(out[1]).all() if where != "o" else np.isnan(out[1, 0])
    assert np.isfinite(out[[0, 2]]).all()


def test_merge_nan_in_empty_device_propagates():
    o, m, l = empty_partial()
    o[0, 0] = np.nan
    out = merge_attention([small_partial(), (o, m, l)])
    assert np.isnan(out[0, 0]) and np.isfinite(out[1:]).all()


# ---- references ---------------------------------------------------------------------------

def test_partial_reference_zero_and_one_token():
    rng = np.random.default_rng(3)
    q, k, v = random_qkv(rng, 4, 1, 64)
    assert partial_attention_reference(q, k[:0], v[:0]) is None
    o, m, l = partial_attention_reference(q, k, v)
    assert o.dtype == m.dtype == l.dtype == np.float32
    np.testing.assert_array_equal(o, np.broadcast_to(v.astype(np.float32), o.shape))
    np.testing.assert_array_equal(l, np.ones(4, np.float32))
    expected_m = (q.astype(np.float64) @ k.astype(np.float64).T)[:, 0].astype(np.float32)
    np.testing.assert_array_equal(m, expected_m)


def test_attention_reference_is_softmax():
    q = np.array([[1.0, 0.0, 0.0, 0.0]], np.float16)
    k = np.array([[2.0, 0, 0, 0], [0, 0, 0, 0]], np.float16)
    v = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]], np.float16)
    w = math.exp(1.0)                           # 2 / sqrt(4)
    np.testing.assert_allclose(attention_reference(q, k, v)[0],
                               [w / (w + 1), 1 / (w + 1), 0, 0], rtol=1e-15)


def test_scale_query_rounds_once():
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((8, 128)) * 10).astype(np.float16)
    qs = scale_query(q)
    assert qs.dtype == np.float16
    np.testing.assert_array_equal(qs, (q.astype(np.float64) / math.sqrt(128)).astype(np.float16))


@pytest.mark.parametrize("fn", [attention_reference, partial_attention_reference])
def test_references_validate(fn):
    q = np.zeros((2, 64), np.float16)
    k = np.zeros((3, 64), np.float16)
    with pytest.raises(ArgumentError, match="float16"):
        fn(q.astype(np.float32), k, k)
    with pytest.raises(ShapeError, match="head dimension"):
        fn(q, k[:, :32], k[:, :32])
    with pytest.raises(ShapeError, match=r"\(3, 64\) and \(2, 64\)"):
        fn(q, k, k[:2])
    with pytest.raises(ArgumentError):
        fn(q.tolist(), k, k)
    with pytest.raises(ValueError):
        scale_query(q[0])


def test_attention_reference_needs_a_token():
    q = np.zeros((2, 64), np.float16)
    with pytest.raises(ShapeError, match="empty"):
        attention_reference(q, q[:0], q[:0])


# ---- token split --------------------------------------------------------------------------

def test_split_even():
    assert split_tokens(10, 4) == [3, 3, 2, 2]
    assert split_tokens(8, 4) == [2, 2, 2, 2]
    assert split_tokens(2, 5) == [1, 1, 0, 0, 0]
    assert split_tokens(0, 3) == [0, 0, 0]
    assert split_tokens(np.int64(7), 1) == [7]


@settings(max_examples=200, deadline=None)
@given(total=st.integers(0, 5000), devices=st.integers(1, 16), seed=st.integers(0, 2**32 - 1),
       uneven=st.booleans())
def test_split_property(total, devices, seed, uneven):
    counts = split_tokens(total, devices, np.random.default_rng(seed) if uneven else None)
    assert len(counts) == devices and sum(counts) == total
    assert all(isinstance(c, int) and c >= 0 for c in counts)
    if not uneven:
        assert max(counts) - min(counts) <= 1 and counts == sorted(counts, reverse=True)


def test_split_random_gives_empty_and_one_token_devices():
    seen = set()
    for seed in range(50):
        seen.update(split_tokens(2048, 8, seed))
    assert {0, 1} <= seen and max(seen) > 1
    assert split_tokens(300, 4, 1) == split_tokens(300, 4, np.random.default_rng(1))


@pytest.mark.parametrize("total, devices", [(-1, 2), (5, 0), (5.0, 2), (5, 2.5), (True, 2),
                                            (5, None), ("5", 2)])
def test_split_validates(total, devices):
    with pytest.raises(ValueError):
        split_tokens(total, devices)


# ---- the KV operand in HDM --------------------------------------------------------------

def fp16_bytes(values):
    return b"".join(struct.pack("<e", float(x)) for x in values)


@pytest.mark.parametrize("token_major", [True, False])
def test_kv_operand_layout_byte_for_byte(token_major):
    t, d = 5, 3
    k = (np.arange(t * d).reshape(t, d) + 1).astype(np.float16)        # k[t, i] = 3t + i + 1
    v = -(np.arange(t * d).reshape(t, d) + 0.5).astype(np.float16)
    data = kv_operand_bytes(k, v, token_major)
    if token_major:
        kb = fp16_bytes(k[tt, i] for tt in range(t) for i in range(d))     # K: T rows of d
    else:
        kb = fp16_bytes(k[tt, i] for i in range(d) for tt in range(t))     # K^T: d rows of T
    vb = fp16_bytes(v[tt, i] for tt in range(t) for i in range(d))     # V: T rows of d
    assert len(kb) == 30 and kv_v_offset(d, t) == 64
    expected = kb + bytes(34) + vb + bytes(34)
    assert data == expected
    assert len(data) == kv_operand_lines(d, t) * 64 == 128


def test_kv_operand_without_padding():
    t, d = 1, 32                                 # K^T 64 bytes exactly, V the same
    rng = np.random.default_rng(2)
    k, v = (rng.standard_normal((t, d)).astype(np.float16) for _ in range(2))
    data = kv_operand_bytes(k, v, token_major=False)
    assert kv_v_offset(d, t) == 64 and kv_operand_lines(d, t) == 2
    assert data == k.T.astype("<f2").tobytes() + v.astype("<f2").tobytes()
    assert kv_operand_bytes(k, v) == k.astype("<f2").tobytes() + v.astype("<f2").tobytes()


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 300), d=st.sampled_from([1, 3, 8, 64, 128]), seed=st.integers(0, 1000))
def test_kv_operand_size_and_offsets(t, d, seed):
    rng = np.random.default_rng(seed)
    k, v = (rng.standard_normal((t, d)).astype(np.float16) for _ in range(2))
    data = kv_operand_bytes(k, v)
    offset = kv_v_offset(d, t)
    assert len(data) == kv_operand_lines(d, t) * 64
    assert offset % 64 == 0 and offset - 64 < d * t * 2 <= offset
    assert kv_operand_lines(d, t) == -(-d * t * 2 // 64) * 2
    kk = np.frombuffer(data[:d * t * 2], "<f2").reshape(t, d)
    vv = np.frombuffer(data[offset:offset + t * d * 2], "<f2").reshape(t, d)
    np.testing.assert_array_equal(kk, k)
    np.testing.assert_array_equal(vv, v)
    assert not any(data[d * t * 2:offset]) and not any(data[offset + t * d * 2:])


def test_kv_operand_validates():
    k = np.zeros((4, 64), np.float16)
    with pytest.raises(ArgumentError, match="float16"):
        kv_operand_bytes(k.astype(np.float32), k)
    with pytest.raises(ShapeError, match=r"\(4, 64\) and \(4, 32\)"):
        kv_operand_bytes(k, k[:, :32])
    with pytest.raises(ShapeError, match="empty"):
        kv_operand_bytes(k[:0], k[:0])
    with pytest.raises(ShapeError):
        kv_operand_bytes(k[0], k[0])
    for bad in [(0, 4), (4, 0), (-1, 4), (4.0, 4)]:
        with pytest.raises(ValueError):
            kv_operand_lines(*bad)
        with pytest.raises(ValueError):
            kv_v_offset(*bad)


# ---- GQA / MHA ------------------------------------------------------------------------------

def test_query_groups():
    assert query_groups(8, 8) == [[h] for h in range(8)]
    groups = query_groups(32, 8)
    assert groups == [[4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3] for g in range(8)]
    assert sorted(h for g in groups for h in g) == list(range(32))
    assert query_groups(32, 1) == [list(range(32))]


@pytest.mark.parametrize("q_heads, kv_heads", [(32, 5), (4, 8), (0, 1), (8, 0), (8.0, 2)])
def test_query_groups_validates(q_heads, kv_heads):
    with pytest.raises(ValueError):
        query_groups(q_heads, kv_heads)

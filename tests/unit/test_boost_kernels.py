"""boost/kernels.py: CTA grids and their byte ranges."""
import numpy as np
import pytest

from boost.config import load_machine
from boost.kernels import add_kernel, attention_kernel, cap_add_kernel, gemm_kernel, split_k

M = load_machine("gh200")


def _coverage(k, nbytes):
    hits = np.zeros(nbytes, dtype=np.int64)
    for s, n in zip(k.start, k.length):
        hits[s:s + n] += 1
    return hits


@pytest.mark.parametrize("d_in, d_out", [(256, 640), (1024, 128), (192, 200)])
def test_gemm_reads_every_weight_byte_once(d_in, d_out):
    k = gemm_kernel(M, "g", d_in, d_out)
    assert np.all(_coverage(k, d_in * d_out) == 1)
    tiles = -(-d_out // 128)
    assert k.n_ctas == tiles * split_k(tiles, d_in, M.sms)
    assert k.footprints["w"] == 128 * d_in


def test_llama_down_projection_shape():
    k = gemm_kernel(M, "down", 28672, 8192)
    assert k.footprints["w"] == 3584 * 1024          # 128 columns of 28 KiB: 1.75 pages
    assert k.n_ctas == 256 and k.slots == 132 and k.waves == 2
    # each CTA reads the same k-slice of its 128 columns
    cta0 = k.start[k.cta == 0]
    assert len(cta0) == 128 and np.all(np.diff(cta0) == 28672)


def test_add_kernel_and_its_cap_variant():
    k = add_kernel(M, 64 << 20, 1024)
    assert k.slots == 132 * 8 and k.write.sum() == 1024
    c = cap_add_kernel(M, 64 << 20, 1024, 1 / 12)
    host_reads = c.length[c.fixed_tier == 1].sum()
    assert host_reads / c.length.sum() == pytest.approx(1 / 12, abs=1e-3)
    assert c.fixed_tier[c.write].max() == 0          # writes stay on HBM


def test_attention_ctas_per_request_head_split():
    tables = [np.arange(10), np.arange(10, 30)]
    k = attention_kernel(M, "att", tables, 4, lambda b, h: b * 4096 * 4 + h * 4096, 4096)
    splits = k.n_ctas // (2 * 4)
    assert splits * 8 == k.n_ctas and splits == 10   # as many as fill a wave, no more than blocks
    assert len(k.cta) == 4 * 30


def test_bad_kernels_name_the_problem():
    with pytest.raises(ValueError, match="d_in must be an integer >= 1"):
        gemm_kernel(M, "g", 0, 10)
    with pytest.raises(ValueError, match="must split evenly"):
        add_kernel(M, 1000, 3)
    with pytest.raises(ValueError, match="at least one block"):
        attention_kernel(M, "a", [[]], 2, lambda b, h: b, 16)
    with pytest.raises(ValueError, match="second_share must be in"):
        cap_add_kernel(M, 64 << 20, 1024, 0.9)

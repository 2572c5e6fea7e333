"""Model of hw/compute_unit.py: the results, from the golden model (no copy of it).

The device operand, widened to float32, is kept between descriptors while the DRAM
pages under it are unwritten: LoRA adapters and KV caches are read by descriptor after
descriptor, and widening and copying them would otherwise cost the model more than the
arithmetic.
"""
import collections

import numpy as np

from . import golden

CACHE_BYTES = 512 << 20


class ComputeUnit:
    def __init__(self, memory, lanes, softmax_lanes):
        self.memory, self.lanes, self.softmax_lanes = memory, lanes, softmax_lanes
        golden.load_kernels()
        self._operands = collections.OrderedDict()   # (addr, k, n) -> (versions, float32 array)
        self._cached_bytes = 0

    def _operand(self, addr, k, n):
        key, versions = (addr, k, n), self.memory.versions(addr, k * n * 2)
        hit = self._operands.get(key)
        if hit is not None and hit[0] == versions:
            self._operands.move_to_end(key)
            return hit[1]
        w32 = self._widen(self.memory.array(addr, k * n * 2), k, n)
        if hit is not None:
            self._cached_bytes -= hit[1].nbytes
        self._operands[key] = (versions, w32)
        self._cached_bytes += w32.nbytes
        while self._cached_bytes > CACHE_BYTES and len(self._operands) > 1:
            _, (_, old) = self._operands.popitem(last=False)
            self._cached_bytes -= old.nbytes
        return w32

    @staticmethod
    def _widen(raw, rows, cols):
        return golden.widen(np.frombuffer(raw, np.float16, rows * cols).reshape(rows, cols))

    def _input(self, x_addr, m, k):
        return self._widen(self.memory.array(x_addr, m * k * 2), m, k)

    def gemm(self, x_addr, w_addr, m, k, n, trans=False):
        """The FP16 result bytes of in[m x k] (at x_addr) * W[k x n] (at w_addr), or with
        `trans` * S^T, S stored n x k."""
        x = self._input(x_addr, m, k)
        if trans:
            sums = golden.gemm_trans_fp32(x, self._operand(w_addr, n, k), self.lanes)
        else:
            sums = golden.gemm_fp32(x, self._operand(w_addr, k, n), self.lanes)
        return golden.to_fp16(sums).tobytes()

    def lora_xab(self, x_addr, a_addr, b_addr, m, d, r):
        """The FP16 result bytes of fp16(x A) B: x [m x d], A [d x r], B [r x d]."""
        h = golden.to_fp16(golden.gemm_fp32(self._input(x_addr, m, d), self._operand(a_addr, d, r), self.lanes))
        sums = golden.gemm_fp32(golden.widen(h), self._operand(b_addr, r, d), self.lanes)
        return golden.to_fp16(sums).tobytes()

    def attention(self, q_addr, k_addr, v_addr, m, d, t, token_major=False):
        """(O, m, l) of golden.attention_partial: q [m x d], K^T [d x t] (token_major: K
        [t x d], golden.attention_partial_trans), V [t x d]."""
        # K and V are device operands, kept widened as the weights are
        k32 = self._operand(k_addr, t, d) if token_major else self._operand(k_addr, d, t)
        return golden.attention_fp32(self._input(q_addr, m, d), k32, self._operand(v_addr, t, d), self.lanes,
                                     token_major, self.softmax_lanes)

    def attention_paged(self, q_addr, pages, m, d, v_offset):
        """attention() over a paged ATTENTION's pages [(addr, tokens)], token-major: the
        keys of every page, then their values (`v_offset` bytes after each page's keys),
        as one operand's (golden.attention_partial_trans of the concatenation)."""
        k32 = np.concatenate([self._operand(addr, t, d) for addr, t in pages])
        v32 = np.concatenate([self._operand(addr + v_offset, t, d) for addr, t in pages])
        return golden.attention_fp32(self._input(q_addr, m, d), k32, v32, self.lanes, True, self.softmax_lanes)

    def softmax(self, x_addr, m, n, partial):
        """(out float16 [m x n], m, l) of the SOFTMAX op on the FP16 rows at x_addr."""
        return golden.softmax_rows(self._input(x_addr, m, n), partial, self.softmax_lanes)

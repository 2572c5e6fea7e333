"""Model of hw/compute_unit.py: the results, from the golden model (no copy of it)."""
import numpy as np

from . import golden


def gemm_result(x_bytes, w_bytes, m, k, n):
    """The FP16 result bytes of in[m x k] * W[k x n], both given as packed FP16 bytes."""
    x = np.frombuffer(x_bytes, np.float16, m * k).reshape(m, k)
    w = np.frombuffer(w_bytes, np.float16, k * n).reshape(k, n)
    return golden.gemm(x, w).tobytes()

"""Split-KV attention through the driver on the device model: each device's share of the
tokens goes through one ATTENTION descriptor (the model computes what the RTL does, bit for
bit: rtlbench/scenarios.py attention_split_over_devices ties the two), and the host
merges the partial results. The merged output must be within 2e-3 of float64
softmax(q K^T / sqrt(d)) V for d in {64, 128}, over 1..8 devices with uneven token
counts, some devices holding zero or one token."""
import asyncio

import numpy as np
import pytest

import isa
from driver import NdpDevice, attention_reference, merge_attention, split_tokens
from driver.model_transport import ModelTransport

TOLERANCE = 2e-3


async def merged_error(d, devices, total, rows, seed):
    cfg = isa.load_config("default")
    dev = await NdpDevice.open(ModelTransport(cfg))
    await dev.configure_queue(0, sq_base=0, cq_base=1 << 20, data_base=1 << 21, data_limit=cfg.dram_bytes,
                              log2_depth=1, log2_slot=16)
    rng = np.random.default_rng(seed)
    counts = split_tokens(total, devices, rng)
    q = rng.standard_normal((rows, d)).astype(np.float16)
    k = rng.standard_normal((total, d)).astype(np.float16)
    v = rng.standard_normal((total, d)).astype(np.float16)
    partials, start = [], 0
    for t in counts:
        if t == 0:
            partials.append(None)        # an empty device sends nothing
            continue
        block = await dev.upload_kv(k[start:start + t], v[start:start + t])
        partials.append(await dev.attention_partial(q, block))
        start += t
        dev.queue().free_all()
    return np.max(np.abs(merge_attention(partials) - attention_reference(q, k, v)))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("devices", range(1, 9))
def test_split_attention_on_the_device_model(d, devices):
    # as many tokens as devices (most hold 0 or 1), a few each, and many
    errors = [asyncio.run(merged_error(d, devices, total, rows, seed=1000 * d + 10 * devices + i))
              for i, (total, rows) in enumerate([(devices, 1), (7 * devices + 3, 2), (300, 4), (1200, 1)])]
    print(f"d={d} devices={devices}: worst merged error {max(errors):.2e}")
    assert max(errors) <= TOLERANCE

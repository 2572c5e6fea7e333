"""Figures of a device config from the cycle model: `python -m rtlbench.figures [--config paper]`.

Peak GFLOPS; the GB/s a D x D GEMV achieves; and the device time of the PLoRA
operations for Llama2-7B shapes (seed 000, sections V-A and V-B): D = 4096, LoRA rank
R in {8, 16, 32, 64, 128}, batch 1..256; 32 heads of 128, 2K tokens per request spread
over 4 devices (512 per device).

- E4: m = x A (B x D times D x R), one GEMM descriptor; m crosses the link.
- E3: y = x A B in one LORA_XAB descriptor: x A stays on the device, y crosses the link.
- Attention, per request and KV head, on the device's 512 tokens: one ATTENTION
  descriptor (P = q K^T, partial softmax, O = S V on the device; O, m, l cross the link).
  Llama2-7B is MHA: one query head per KV head.
Each descriptor is run on the model through the driver, as a host would.
"""
import argparse
import asyncio

import numpy as np

import isa
from driver import NdpDevice
from driver.model_transport import ModelTransport

D, RANKS, BATCHES = 4096, (8, 16, 32, 64, 128), (1, 4, 16, 64, 256)
HEADS, HEAD_DIM, TOKENS_PER_DEVICE = 32, 128, 2048 // 4


class Runner:
    def __init__(self, cfg):
        self.cfg = cfg

    async def open(self):
        self.dev = await NdpDevice.open(ModelTransport(self.cfg))
        self.queue = await self.dev.configure_queue(0, sq_base=0, cq_base=1 << 30, data_base=1 << 31,
                                                    data_limit=self.cfg.dram_bytes, log2_depth=1, log2_slot=24,
                                                    irq=True)
        self.rng = np.random.default_rng(0)
        return self

    def _array(self, shape):
        return (self.rng.standard_normal(shape) / 8).astype(np.float16)

    async def gemm_cycles(self, m, k, n):
        """Device cycles of one GEMM descriptor in[m x k] * W[k x n]."""
        tensor = await self.dev.upload(self._array((k, n)))
        _, completion = await self.dev.gemm(self._array((m, k)), tensor, return_completion=True,
                                            timeout_cycles=1 << 40)
        self.queue.free_all()
        return completion.cycles

    async def xab_cycles(self, m, d, r):
        adapter = await self.dev.upload_lora(self._array((d, r)), self._array((r, d)))
        _, completion = await self.dev.lora_xab(self._array((m, d)), adapter, return_completion=True,
                                                timeout_cycles=1 << 40)
        self.queue.free_all()
        return completion.cycles

    async def attention_cycles(self, rows, d, t):
        block = await self.dev.upload_kv(self._array((t, d)), self._array((t, d)))
        _, completion = await self.dev.attention_partial(self._array((rows, d)), block, return_completion=True,
                                                         timeout_cycles=1 << 40)
        self.queue.free_all()
        return completion.cycles

    def seconds(self, cycles):
        return cycles / self.cfg.clock_hz

    def link_seconds(self, nbytes):
        return self.cfg.link_latency_s + nbytes / self.cfg.link_bytes_per_s


async def figures(cfg, out=print):
    run = await Runner(cfg).open()
    out(f"config {cfg.name!r}: {cfg.lanes} lanes x {cfg.rows} rows = {cfg.macs} FP16 MACs at "
        f"{cfg.clock_hz / 1e9:g} GHz; DRAM port {cfg.beat_bytes} B/cycle = {cfg.dram_bytes_per_s / 1e9:.0f} GB/s, "
        f"read latency {cfg.dram_read_latency} cycles; link {cfg.link_bytes_per_s / 1e9:.0f} GB/s, "
        f"{cfg.link_latency_s * 1e9:.0f} ns")
    out(f"peak GFLOPS: {cfg.peak_flops / 1e9:.0f}")
    k = min(D, cfg.k_max)
    n = min(D, cfg.n_max)
    cycles = await run.gemm_cycles(1, k, n)
    gbps = k * n * 2 / run.seconds(cycles) / 1e9
    out(f"GEMV {k}x{n}: {cycles} cycles, {gbps:.1f} GB/s achieved "
        f"({gbps * 1e9 / cfg.dram_bytes_per_s:.1%} of the DRAM port)")

    out("\nLoRA, D = 4096: device time in us (E4: x A, one GEMM; E3: (x A) B, one LORA_XAB "
        "descriptor, x A kept on the device) and the link time of their traffic")
    out(f"{'R':>5} {'batch':>6} {'E4 us':>10} {'E3 us':>10} {'E4 link us':>11} {'E3 link us':>11}")
    d = min(D, cfg.k_max, cfg.n_max)
    for r in RANKS:
        for b in BATCHES:
            e4 = run.seconds(await run.gemm_cycles(b, d, r))
            e3 = run.seconds(await run.xab_cycles(b, d, r))
            link4 = run.link_seconds(b * d * 2) + run.link_seconds(b * r * 2)   # x in, m out
            link3 = run.link_seconds(b * d * 2) + run.link_seconds(b * d * 2)   # x in, y out
            out(f"{r:>5} {b:>6} {e4 * 1e6:>10.2f} {e3 * 1e6:>10.2f} {link4 * 1e6:>11.2f} {link3 * 1e6:>11.2f}")

    out(f"\nAttention, Llama2-7B ({HEADS} heads x {HEAD_DIM}, MHA), {TOKENS_PER_DEVICE} tokens per request on "
        f"this device: one ATTENTION descriptor per request and head (q K^T, partial softmax, S V)")
    per_head = run.seconds(await run.attention_cycles(1, HEAD_DIM, TOKENS_PER_DEVICE))
    out(f"per head: {per_head * 1e6:.2f} us; result O, m, l: {HEAD_DIM * 4 + 128} bytes over the link")
    out(f"{'batch':>6} {'device us':>10} {'KV bytes read':>14}")
    for b in BATCHES:
        kv = b * HEADS * 2 * TOKENS_PER_DEVICE * HEAD_DIM * 2
        out(f"{b:>6} {b * HEADS * per_head * 1e6:>10.1f} {kv:>14}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="paper")
    args = parser.parse_args(argv)
    asyncio.run(figures(isa.load_config(args.config)))


if __name__ == "__main__":
    main()

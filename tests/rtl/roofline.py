"""PE-array and DRAM-port utilization: `python tests/rtl/roofline.py [--config NAME] [--model-only]`
(`make roofline`).

For GEMV shapes: the DRAM port's bytes per cycle over its peak, counting every byte the
descriptor moves (weights, input, result, slot header and completion lines). For GEMM
shapes with in_rows >= ROWS: MACs per cycle over LANES x ROWS. The summary line gives the
minima over GEMVs with K x N >= 64K (all, and those with K >= 512, where the readout after
the weights is short beside them) and over compute-bound GEMMs (N >= 16 ROWS). Cycles are
the completion's device cycles (taken -> completion write), from the RTL on the fast
co-simulation path and from the cycle model; the RTL runs the default config (or
--config), the model also the paper's config.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import isa  # noqa: E402
from driver import NdpDevice  # noqa: E402
from driver.model_transport import ModelTransport  # noqa: E402
from cocotb_demo import moved_bytes  # noqa: E402

GEMV = [(1, 4096, 16), (1, 4096, 32), (1, 2048, 128), (1, 1024, 1024), (1, 4096, 4096),
        (1, 4096, 24), (1, 4096, 100), (1, 4096, 1000),
        (1, 512, 4096), (1, 256, 256), (1, 16, 4096)]          # short K: the readout shows
GEMM = [(4, 4096, 64), (8, 2048, 256), (16, 1024, 1024), (4, 4096, 4096), (32, 4096, 16)]


def shapes(cfg):
    """The shapes, clipped to the config's buffers (K <= k_max, N <= n_max)."""
    clip = lambda m, k, n: (m, min(k, cfg.k_max), min(n, cfg.n_max))   # noqa: E731
    return [clip(*s) for s in GEMV], [clip(*s) for s in GEMM]


def utilization(cfg, m, k, n, cycles):
    if m == 1:
        return moved_bytes(cfg, m, k, n) / cycles / cfg.beat_bytes
    return m * k * n / cycles / cfg.macs


def model_cycles(cfg, all_shapes):
    """Device cycles of each shape on the cycle model, through the same driver."""
    import asyncio

    async def go():
        transport = ModelTransport(cfg)
        dev = await NdpDevice.open(transport)
        await dev.configure_queue(0, sq_base=0, cq_base=2 << 20, data_base=4 << 20, data_limit=cfg.dram_bytes,
                                  log2_depth=1, log2_slot=20, irq=True)
        rng = np.random.default_rng(11)
        out = []
        for m, k, n in all_shapes:
            w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
            x = rng.standard_normal((m, k)).astype(np.float16)
            tensor = await dev.upload(w)
            _, completion = await dev.gemm(x, tensor, return_completion=True)
            out.append(completion.cycles)
            dev.queue().free_all()
        return out
    return asyncio.run(go())


def rtl_cycles(config, all_shapes):
    from runner import BUILD, run_fast
    result = BUILD / f"run-fast-{config}" / "roofline.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    run_fast("cocotb_fast", testcase="roofline", config=config, env={
        "NDP_ROOFLINE_SHAPES": json.dumps(all_shapes), "NDP_FAST_RESULT": str(result),
        "COCOTB_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    return json.loads(result.read_text())


def report(cfg, gemv, gemm, rtl, model):
    print(f"\nconfig {cfg.name!r}: LANES={cfg.lanes} ROWS={cfg.rows}, DRAM port {cfg.beat_bytes} B/cycle, "
          f"{cfg.macs} MACs/cycle")
    print(f"{'shape':>16} {'figure':>10} {'rtl cycles':>11} {'rtl util':>9} {'model cycles':>13} {'model util':>11}")
    figures = {}
    for i, (m, k, n) in enumerate(gemv + gemm):
        kind = "port B/cyc" if m == 1 else "MACs/cyc"
        r = f"{rtl[i]:>11} {utilization(cfg, m, k, n, rtl[i]):>8.1%}" if rtl else f"{'-':>11} {'-':>9}"
        u = utilization(cfg, m, k, n, model[i])
        figures[(m, k, n)] = utilization(cfg, m, k, n, rtl[i]) if rtl else u
        print(f"{m:>4}x{k:>5}x{n:>5} {kind:>10} {r} {model[i]:>13} {u:>10.1%}")
    big = [figures[s] for s in gemv if s[1] * s[2] >= 1 << 16]
    # K >= 512: the readout (about 16 cycles per LANES outputs, after the weights) is
    # short beside the weights
    deep = [figures[s] for s in gemv if s[1] * s[2] >= 1 << 16 and s[1] >= 512]
    # a weight beat feeds LANES x ROWS MACs, so a GEMM is never slower than its weights; it
    # is compute-bound when the input rows add little to the port (N >= 16 ROWS)
    compute = [figures[s] for s in gemm if s[0] >= cfg.rows and s[2] >= 16 * cfg.rows]
    source = "rtl" if rtl else "model"
    print(f"roofline config={cfg.name} source={source} gemv_port_util_min={min(big):.1%} "
          f"gemv_port_util_min_k512={min(deep):.1%} gemm_mac_util_min_compute_bound={min(compute):.1%}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--model-only", action="store_true")
    args = parser.parse_args(argv)
    cfg = isa.load_config(args.config)
    gemv, gemm = shapes(cfg)
    rtl = None if args.model_only else rtl_cycles(args.config, gemv + gemm)
    report(cfg, gemv, gemm, rtl, model_cycles(cfg, gemv + gemm))
    if not args.model_only:
        paper = isa.load_config("paper")
        gemv, gemm = shapes(paper)
        report(paper, gemv, gemm, None, model_cycles(paper, gemv + gemm))


if __name__ == "__main__":
    main()

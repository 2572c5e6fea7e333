"""DRAM-port and PE-array utilization on the shapes the system sends, back to back:
`python rtlbench/roofline.py [--config paper] [--source both|model|rtl] [--copies 8]`
(`make roofline`).

Workloads (D = 4096 clipped to the config's buffers, R in 8 .. 128):
- gemv, gemv^T: one GEMV, the weight stored K x N or N x K (TRANS_W): E4's x A at batch 1
  (D x R), B's product (R x D), and square and wide layers;
- e4: LoRA E4 x A as one GEMM at batch b = 2 .. 256 (the weights read once per ROWS rows);
- e3: LoRA E3 (x A) B in one descriptor at batch 1, 16, 256;
- attention, attention^T: one KV head's 512 tokens at d = 128, keys stored K^T (d x T) or
  token-major with TRANS_W (T x d, as the driver stores them), for 1 and 8 query rows (MHA,
  and a GQA group).

Each workload runs `copies` identical descriptors submitted at once (one doorbell) on a
queue of as many slots, each slot the power of two that holds the payload or the result
after the header. The period is the spacing of their completion interrupts in steady
state, (t[last] - t[2]) / (copies - 3): the first two pay the pipeline's fill. Every
completion must be OK and its result equal the first's, which must equal the golden model
bit for bit. Utilization: the bytes a descriptor must move in the busier direction of the
DRAM port (reads: its device operand once per group of ROWS input rows, the payload, the
slot header; writes: the result, the completion line) per period over the aggregate port,
and MACs per period over the array.

The RTL runs on the fast co-simulation path (rtlbench/cocotb_fast.py `roofline`, the same
code through FastRtlTransport), the model through ModelTransport. The last line (the RTL's
when it ran, else the model's) is

    roofline config=<name> source=<rtl|model> lora_port_util_min_64k=<x>% lora_port_util_min_1m=<x>%

the minimum port utilization over the gemv, gemv^T and e4 workloads with K x N >= 64K and
>= 1M elements (issue 12's targets: 80 % and 90 %). Before it, per source, the attention line

    attention config=<name> source=<rtl|model> page128=<x>% share256=<x>% layer_llama2_7b=<x>% gqa8_mac=<x>%

(`attention_workloads`, issue 25's targets: 85 % each; '-' where a shape did not run).
"""
import argparse
import asyncio
import dataclasses
import json
import os
import sys

import numpy as np

import isa
from isa import Op, Status
from isa.slots import HEADER_BYTES, LINE_BYTES
from isa.encoders import attention_descriptor, attention_result, lora_xab_descriptor, matmul_descriptor
from isa.validate import dram_traffic, payload_bytes, result_bytes
from driver import NdpDevice
from sim import golden
from rtlbench.paged import paged_descriptor, place_pages

RANKS = (8, 16, 32, 64, 128)
BATCHES = (2, 4, 8, 16, 32, 64, 128, 256)
LORA_KINDS = ("gemv", "gemv^T", "e4")      # the summary line's minima run over these
WARMUP = 2                                 # completions before the steady state


@dataclasses.dataclass(frozen=True)
class Workload:
    kind: str           # gemv, gemv^T, e4, e3, attention, attention^T (^T: TRANS_W)
    m: int              # input rows (attention: query rows)
    k: int              # K (e3: D; attention: d)
    n: int              # N (e3: R; attention: tokens)
    rtl: bool = True    # in the RTL's share (the model runs every workload)
    copies: int = 0     # back-to-back descriptors (0: the run's --copies)
    page: int = 0       # paged: tokens a page (a paged ATTENTION, keys token-major)

    @property
    def name(self):
        kind = f"paged/{self.page}" if self.kind == "paged" else self.kind
        base = f"{kind} {self.m}x{self.k}x{self.n}"
        return f"{base} x{self.copies}" if self.copies else base

    @property
    def elements(self):
        return self.k * self.n


def workloads(cfg, rtl_batches=(4, 8)):
    """Every workload, clipped to the config's buffers; `rtl` marks the RTL's share (the fast
    path runs about 1 k cycles/s at the paper's size): gemv/gemv^T up to 1M elements, e4 at
    `rtl_batches`, e3 up to batch 16, attention."""
    d = min(4096, cfg.k_max, cfg.n_max)
    out = []
    for kind in ("gemv", "gemv^T"):
        shapes = [(d, r) for r in RANKS] + [(16, d), (128, d), (1024, 1024), (d, 1024), (d, d)]
        shapes = [(min(k, cfg.k_max), min(n, cfg.n_max)) for k, n in shapes]
        out += [Workload(kind, 1, k, n, rtl=k * n <= 1 << 20) for k, n in shapes]
    out += [Workload("e4", b, d, r, rtl=b in rtl_batches) for r in RANKS for b in BATCHES]
    out += [Workload("e3", b, d, r, rtl=b <= 16) for r in (16, 64) for b in (1, 16, 256)]
    tokens = min(512, cfg.k_max, cfg.n_max)
    out += [Workload(kind, m, 128, tokens) for kind in ("attention", "attention^T") for m in (1, 8)]
    out += attention_workloads(cfg)
    return out


def attention_workloads(cfg):
    """The attention line's shapes (issue 25), keys token-major as the driver stores them,
    d = 128: a 128-token page, one query row, one descriptor each; a 256-token request-head
    share in 128-token pages as one paged descriptor (and, to compare, as one unpaged
    operand); a Llama2-7B layer's attention on one of 4 devices at batch 32 and context
    1,024 (32 requests x 32 heads: 1,024 shares of 2 pages, a paged descriptor each; model
    only: the fast RTL path runs about 1 k cycles/s at the paper's size); a GQA group of 8
    query rows on 512 tokens."""
    if min(cfg.k_max, cfg.n_max) < 512:
        return []
    return [Workload("attention^T", 1, 128, 128), Workload("paged", 1, 128, 256, page=128),
            Workload("attention^T", 1, 128, 256),
            Workload("paged", 1, 128, 256, rtl=False, copies=LAYER_SHARES, page=128)]


LAYER_SHARES = 32 * 32              # requests x heads of a layer: one 256-token share each


class Prepared:
    """A workload's operands in device memory, its descriptor, payload and expected result."""

    def __init__(self, cfg, work, rng):
        self.work = work
        m, k, n = work.m, work.k, work.n
        lanes = cfg.lanes
        x = (rng.standard_normal((m, k))).astype(np.float16)
        if work.kind == "paged":
            keys = rng.standard_normal((n, k)).astype(np.float16)
            values = rng.standard_normal((n, k)).astype(np.float16)
            self.operand = ("pages", keys, values, work.page.bit_length() - 1)
            self.expected = golden.attention_partial_trans(x, keys, values, lanes, cfg.softmax_lanes)
        elif work.kind.startswith("attention"):
            keys = rng.standard_normal((n, k)).astype(np.float16)
            values = rng.standard_normal((n, k)).astype(np.float16)
            token_major = work.kind == "attention^T"
            self.operand = ("kv", keys, values, token_major)
            self.expected = golden.attention_partial_kv(x, keys, values, lanes, token_major, cfg.softmax_lanes)
        elif work.kind == "e3":
            a = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
            b = (rng.standard_normal((n, k)) / np.sqrt(n)).astype(np.float16)
            self.operand = ("lora", a, b)
            self.expected = golden.lora_xab(x, a, b, lanes)
        else:
            w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
            if work.kind == "gemv^T":
                self.operand = ("tensor", np.ascontiguousarray(w.T))
                self.expected = golden.gemm_trans(x, w.T, lanes)
            else:
                self.operand = ("tensor", w)
                self.expected = golden.gemm(x, w, lanes)
        self.x = x

    async def place(self, dev):
        kind, *arrays = self.operand
        work = self.work
        if kind == "pages":
            list_addr, _ = await place_pages(dev, dev.queue(), arrays[0], arrays[1], arrays[2])
            self.desc = paged_descriptor(list_addr, work.n, work.k, arrays[2], work.m)
        elif kind == "kv":
            block = await dev.upload_kv(arrays[0], arrays[1], token_major=arrays[2])
            self.desc = attention_descriptor(block, work.m)
        elif kind == "lora":
            self.desc = lora_xab_descriptor(await dev.upload_lora(*arrays), work.m)
        else:
            op = Op.GEMV if work.kind.startswith("gemv") else Op.GEMM
            self.desc = matmul_descriptor(op, await dev.upload(arrays[0]), work.m,
                                          transposed=work.kind == "gemv^T")
        data = self.x.tobytes()
        self.payload = data + bytes(payload_bytes(self.desc) - len(data))

    def check(self, result):
        """Raise unless `result` (a completion's bytes) is the golden model's, bit for bit."""
        if self.work.kind.startswith("attention") or self.work.kind == "paged":
            got = attention_result(result, self.desc)
            same = all(np.array_equal(np.asarray(g, np.float32).view(np.uint32),
                                      np.asarray(e, np.float32).view(np.uint32))
                       for g, e in zip(got, self.expected))
        else:
            expected = np.asarray(self.expected, np.float16).tobytes()
            same = result[:len(expected)] == expected
        if not same:
            raise AssertionError(f"{self.work.name}: the result differs from the golden model")


def slot_geometry(desc, copies):
    """(log2_depth, log2_slot): a slot per copy, each the power of two that holds the
    header and the larger of payload and result."""
    need = HEADER_BYTES + max(payload_bytes(desc), result_bytes(desc), LINE_BYTES)
    return max(1, (copies - 1).bit_length()), (need - 1).bit_length()


def moved_bytes(cfg, desc):
    """Bytes a descriptor must move in the busier direction of the DRAM port (AXI reads and
    writes have channels of their own, and the DRAM serves both each cycle): reads of the
    device operand once per group of ROWS input rows, the payload and the slot header;
    writes of the result and the completion line."""
    return max(dram_traffic(cfg, desc))


def macs(work):
    if work.kind in ("e3", "paged") or work.kind.startswith("attention"):
        return 2 * work.m * work.k * work.n
    return work.m * work.k * work.n


async def measure(dev, now, cfg, work, copies, memory_bytes, rng):
    """Run `copies` back-to-back descriptors of `work` on queue 0; returns a dict of the
    period (cycles), the first completion's cycles and the utilizations."""
    prepared = Prepared(cfg, work, rng)
    copies = work.copies or copies
    log2_depth, log2_slot = slot_geometry(_shape_descriptor(work), copies)
    ring = (1 << log2_depth) << log2_slot
    queue = await dev.configure_queue(0, sq_base=0, cq_base=ring, data_base=2 * ring,
                                      data_limit=memory_bytes, log2_depth=log2_depth,
                                      log2_slot=log2_slot, irq=True)
    await prepared.place(dev)
    transport = dev.transport
    while await transport.wait_irq(0, 0):      # pulses of earlier workloads
        pass
    budget = copies * (4 * moved_bytes(cfg, prepared.desc) // cfg.beat_bytes + 4 * macs(work) // cfg.macs
                       + 20_000)
    seqs = await queue.submit_many([(prepared.desc, prepared.payload)] * copies)
    times = []
    for _ in seqs:
        if not await transport.wait_irq(0, budget):
            raise AssertionError(f"{work.name}: {len(times)} of {copies} completions in {budget} cycles")
        times.append(now())
    completions = [await queue.wait(s) for s in seqs]
    for c in completions:
        if c.status != Status.OK:
            raise AssertionError(f"{work.name}: seq {c.seq} answered {c.status.name}")
        if c.result != completions[0].result:
            raise AssertionError(f"{work.name}: seq {c.seq}'s result differs from seq {seqs[0]}'s")
    prepared.check(completions[0].result)
    queue.free_all()
    period = (times[-1] - times[WARMUP]) / (copies - 1 - WARMUP)
    return {"name": work.name, "period": period, "first_cycles": completions[0].cycles,
            "port": moved_bytes(cfg, prepared.desc) / period / cfg.beat_bytes,
            "mac": macs(work) / period / cfg.macs}


def _shape_descriptor(work):
    """The workload's descriptor with a zero address: its payload and result sizes."""
    from isa.encoders import DeviceTensor, KvBlock, LoraAdapter
    if work.kind == "paged":
        return paged_descriptor(0, work.n, work.k, work.page.bit_length() - 1, work.m)
    if work.kind.startswith("attention"):
        return attention_descriptor(KvBlock(0, work.k, work.n, work.kind == "attention^T"), work.m)
    if work.kind == "e3":
        return lora_xab_descriptor(LoraAdapter(0, work.k, work.n), work.m)
    trans = work.kind == "gemv^T"
    tensor = DeviceTensor(0, work.n, work.k) if trans else DeviceTensor(0, work.k, work.n)
    return matmul_descriptor(Op.GEMV if work.kind.startswith("gemv") else Op.GEMM, tensor, work.m, trans)


async def measure_all(dev, now, cfg, works, copies, memory_bytes, progress=None):
    rng = np.random.default_rng(12)
    out = []
    for work in works:
        out.append(await measure(dev, now, cfg, work, copies, memory_bytes, rng))
        if progress:
            progress(out[-1])
    return out


def model_results(cfg, works, copies, progress=None):
    from driver.model_transport import ModelTransport

    async def go():
        transport = ModelTransport(cfg, backdoor_memory=True)
        dev = await NdpDevice.open(transport)
        return await measure_all(dev, lambda: transport.now, cfg, works, copies,
                                 min(cfg.dram_bytes, 1 << 40), progress)
    return asyncio.run(go())


def memory_for(cfg, works, copies):
    """Fast-path DRAM bytes the workloads need: their rings and operands (rounded up)."""
    need = 0
    for work in works:
        desc = _shape_descriptor(work)
        log2_depth, log2_slot = slot_geometry(desc, copies)
        need = max(need, 2 * (1 << log2_depth << log2_slot) + 2 * desc.dev_size * LINE_BYTES)
    return max(1 << 28, 1 << (need - 1).bit_length())


def rtl_results(config, works, copies):
    from rtlbench.runner import BUILD, run_fast
    cfg = isa.load_config(config)
    result = BUILD / f"run-fast-{config}" / "roofline.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    memory = memory_for(cfg, works, copies)
    run_fast("cocotb_fast", testcase="roofline", config=config, plusargs=[f"+dram_bytes={memory}"], env={
        "NDP_ROOFLINE": json.dumps({"works": [dataclasses.astuple(w) for w in works], "copies": copies,
                                    "memory": memory}),
        "NDP_FAST_RESULT": str(result), "COCOTB_LOG_LEVEL": "WARNING",
        "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    return json.loads(result.read_text())


def summary(cfg, source, works, results):
    lora = [(w, r) for w, r in zip(works, results) if w.kind in LORA_KINDS]
    mins = {}
    for label, floor in (("64k", 1 << 16), ("1m", 1 << 20)):
        values = [r["port"] for w, r in lora if w.elements >= floor]
        mins[label] = f"{min(values):.1%}" if values else "-"
    return (f"roofline config={cfg.name} source={source} lora_port_util_min_64k={mins['64k']} "
            f"lora_port_util_min_1m={mins['1m']}")


def attention_summary(cfg, source, results):
    """The attention line (issue 25's four targets), or None when its shapes did not run:
    port utilization of a 128-token page, of a 256-token share in one descriptor and of the
    Llama2-7B layer, back to back, and the MAC utilization of a GQA group of 8 rows."""
    by_name = {r["name"]: r for r in results}
    picks = {"page128": ("attention^T 1x128x128", "port"), "share256": ("paged/128 1x128x256", "port"),
             "layer_llama2_7b": (f"paged/128 1x128x256 x{LAYER_SHARES}", "port"),
             "gqa8_mac": ("attention^T 8x128x512", "mac")}
    if not any(name in by_name for name, _ in picks.values()):
        return None
    cells = " ".join(f"{key}={by_name[name][field]:.1%}" if name in by_name else f"{key}=-"
                     for key, (name, field) in picks.items())
    return f"attention config={cfg.name} source={source} {cells}"


def _cells(result, width):
    if result is None:
        return f"{'-':>{width}} {'-':>7} {'-':>7}"
    return f"{result['period']:>{width}.1f} {result['port']:>7.1%} {result['mac']:>7.1%}"


def report(cfg, works, model, rtl):
    """The table (model and RTL side by side, '-' where one did not run) and the summary
    lines, the RTL's last."""
    print(f"\nconfig {cfg.name!r}: LANES={cfg.lanes} ROWS={cfg.rows} ({cfg.macs} MACs), "
          f"{cfg.dram_channels} channel(s), port {cfg.beat_bytes} B/cycle")
    sources = {"model": {r["name"]: r for r in model or []}, "rtl": {r["name"]: r for r in rtl or []}}
    print(f"{'workload':>24} {'K*N':>8} | {'model period':>12} {'port':>7} {'MAC':>7} | "
          f"{'rtl period':>10} {'port':>7} {'MAC':>7} {'rtl/model':>9}")
    for w in works:
        m, r = sources["model"].get(w.name), sources["rtl"].get(w.name)
        if m is None and r is None:
            continue
        left = _cells(m, 12)
        right = _cells(r, 10)
        ratio = f"{r['period'] / m['period']:>9.3f}" if m and r else f"{'-':>9}"
        print(f"{w.name:>24} {w.elements:>8} | {left} | {right} {ratio}")
    for source, by_name in sources.items():
        ran = [w for w in works if w.name in by_name]
        if ran:
            line = attention_summary(cfg, source, list(by_name.values()))
            if line:
                print(line)
            print(summary(cfg, source, ran, [by_name[w.name] for w in ran]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="paper")
    parser.add_argument("--source", choices=("both", "model", "rtl"), default="both")
    parser.add_argument("--copies", type=int, default=8, help="back-to-back descriptors per workload (>= 4)")
    parser.add_argument("--kinds", default=None, help="comma-separated workload kinds (default: all)")
    args = parser.parse_args(argv)
    if args.copies < WARMUP + 2:
        parser.error(f"--copies must be at least {WARMUP + 2} (the steady state needs two intervals)")
    cfg = isa.load_config(args.config)
    works = workloads(cfg)
    if args.kinds:
        kinds = args.kinds.split(",")
        unknown = set(kinds) - {w.kind for w in works}
        if unknown:
            parser.error(f"unknown workload kind(s) {sorted(unknown)!r}")
        works = [w for w in works if w.kind in kinds]
    model = None
    if args.source != "rtl":
        model = model_results(cfg, works, args.copies)
    rtl = None
    if args.source != "model":
        rtl = rtl_results(args.config, [w for w in works if w.rtl], args.copies)
    report(cfg, works, model, rtl)


if __name__ == "__main__":
    main()

"""Power of the NDP core: energy per operation times the activity of a named workload that
runs on the cycle-approximate model, plus the buffers' leakage.

Energies (45 nm, 0.9 V): M. Horowitz, "Computing's energy problem (and what we can do about
it)", ISSCC 2014, the table of energy per operation (HOROWITZ_PJ): FP16 multiply 1.1 pJ,
FP32 add 0.9 pJ (a MAC of this core: FP16 product, FP32 sum, hw/fp.py), SRAM read of 64 bits
from an 8 KB / 32 KB / 1 MB array 10 / 20 / 100 pJ, DRAM 1.3-2.6 nJ per 64 bits. The
buffers' energies and leakage are CACTI 7's for the macros each buffer is built of
(area/sram.py); Horowitz's SRAM figures are shown beside them as a reference.

Activity of one descriptor (counted from its shape, as the RTL moves data; the cycles and so
the time are the model's):
- MACs: m K N per product (two products for E3 x A B and attention);
- PE-array chunks (isa/pe_array.py's plans): a chunk is a line of LANES weights entering a
  PE row; it reads an input-buffer line when its input line is not the one the PE row
  holds (hw/compute_unit.py `held_line`, `in_lines`). Plain, the
  partial sums being added into are in the PE rows' slot registers (isa/pe_array.py:
  a stage's words, or a column tile's), and each set of each word is written into the
  output buffer once (`acc_lines`); the slots are read and written as `slot_lines` says,
  at FLOP_BIT_PJ a bit. Transposed, a row's value is written once at its tree's root;
- the readout reads each result word once from the accumulators;
- DRAM: the device operand once per group of ROWS input rows, the payload and the slot's
  header line (reads), the result and the completion line (writes); every line read passes
  through the DRAM reader's buffer (a write and a read of it) and every input line is
  written into the input buffer once per group.

Logic outside the FP cells (control, the unpacker, the line packer, the interleaver, flops
and clock) has no energy here: the open cell data used for its area has no power
characterization. Its share of the area is in the report.
"""
import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from isa import Status
from isa.pe_array import ACC_SLOTS
from isa.slots import HEADER_BYTES, LINE_BYTES
from isa.validate import payload_bytes, result_bytes, stages

if TYPE_CHECKING:
    from isa import Descriptor, DeviceConfig
    from isa.pe_array import Plan
    from isa.system import ModelConfig

# pJ, 45 nm (Horowitz, ISSCC 2014, "Energy per operation" table)
HOROWITZ_PJ = {"fp16_mul": 1.1, "fp16_add": 0.4, "fp32_mul": 3.7, "fp32_add": 0.9, "int32_add": 0.1,
               "sram_64b_8kb": 10.0, "sram_64b_32kb": 20.0, "sram_64b_1mb": 100.0,
               "dram_64b_low": 1300.0, "dram_64b_high": 2600.0}
# um^2, 45 nm (the same paper's area table)
HOROWITZ_UM2 = {"fp16_mul": 1640.0, "fp16_add": 1360.0, "fp32_mul": 7700.0, "fp32_add": 4184.0}
MAC_PJ = HOROWITZ_PJ["fp16_mul"] + HOROWITZ_PJ["fp32_add"]
# a bit of a flip-flop register file (the PE rows' slot registers) written, or read through
# its multiplexers: about one bit of Horowitz's 32-bit integer adder (0.1 pJ / 32), a few
# gates switching; the cell data has no power figures of its own (see above)
FLOP_BIT_PJ = HOROWITZ_PJ["int32_add"] / 32
DRAM_PJ_PER_BYTE = (HOROWITZ_PJ["dram_64b_low"] + HOROWITZ_PJ["dram_64b_high"]) / 2 / 8


@dataclasses.dataclass(frozen=True)
class Workload:
    """One transformer layer's work on the device in a decode step: LoRA E3 (x A B, rank
    `rank`) for the square projections (q, k, v, o) of `batch` tokens of one adapter, and
    integral attention of each KV head's query rows over `context` tokens (token-major)."""
    model: str = "llama2-7b"
    batch: int = 16
    rank: int = 16
    context: int = 512

    def fitted(self, cfg: "DeviceConfig") -> "Workload":
        """This workload with its batch cut to what the config's input buffer holds."""
        from isa.system import load_model
        hidden = load_model(self.model).hidden
        return dataclasses.replace(self, batch=max(1, min(self.batch, cfg.in_buf_bytes // (2 * hidden))))

    @property
    def name(self) -> str:
        return f"{self.model} decode layer, batch {self.batch}, rank {self.rank}, context {self.context}"


def descriptors(workload: Workload) -> tuple[list[tuple[str, int, int, int]], "ModelConfig"]:
    """(kind, m, d, n) of each descriptor of one layer: ("e3", batch, hidden, rank) per
    square projection, ("attention", group, head_dim, context) per KV head."""
    from isa.system import load_model
    model = load_model(workload.model)
    out = [("e3", workload.batch, p.d_in, workload.rank) for p in model.projections if p.d_in == p.d_out]
    out += [("attention", model.group, model.head_dim, workload.context)] * model.kv_heads
    return out, model


def _descriptor(kind: str, m: int, d: int, n: int, operand: Any) -> "Descriptor":
    from isa import Op
    from isa.encoders import attention_descriptor, lora_xab_descriptor, matmul_descriptor
    if kind in ("gemm", "gemm_t"):
        return matmul_descriptor(Op.GEMM, operand, m, transposed=kind == "gemm_t")
    return lora_xab_descriptor(operand, m) if kind == "e3" else attention_descriptor(operand, m)


def _placeholder(kind: str, d: int, n: int) -> Any:
    """An operand of the shape, at address 0 (for the slot's size only)."""
    from isa.encoders import DeviceTensor, KvBlock, LoraAdapter
    if kind in ("gemm", "gemm_t"):
        rows, cols = (n, d) if kind == "gemm_t" else (d, n)
        return DeviceTensor(0, rows, cols)
    return LoraAdapter(0, d, n) if kind == "e3" else KvBlock(0, d, n, True)


async def _run(cfg: "DeviceConfig", shapes: list[tuple[str, int, int, int]]) -> tuple[list["Descriptor"], int]:
    """Submit the descriptors back to back on the model; returns (descriptors, cycles)."""
    from driver import NdpDevice
    from driver.model_transport import ModelTransport
    from isa.encoders import DeviceTensor, KvBlock, LoraAdapter
    rng = np.random.default_rng(13)
    transport = ModelTransport(cfg, backdoor_memory=True)
    dev = await NdpDevice.open(transport)
    # a slot per descriptor, each the power of two that holds the largest payload or result
    need = max(HEADER_BYTES + max(payload_bytes(d), result_bytes(d), LINE_BYTES) for d in
               (_descriptor(k, m, d, n, _placeholder(k, d, n)) for k, m, d, n in shapes))
    depth, log2_slot = max(1, (len(shapes) - 1).bit_length()), (need - 1).bit_length()
    ring = (1 << depth) << log2_slot
    if 3 * ring > cfg.dram_bytes:
        raise ValueError(f"power workload: its two queue rings of {ring} bytes and their operands do not "
                         f"fit the device's {cfg.dram_bytes} bytes of DRAM")
    queue = await dev.configure_queue(0, sq_base=0, cq_base=ring, data_base=2 * ring,
                                      data_limit=min(cfg.dram_bytes, 1 << 40), log2_depth=depth,
                                      log2_slot=log2_slot, irq=True)
    items: list[tuple[Descriptor, bytes]] = []
    operand: LoraAdapter | KvBlock | DeviceTensor
    uploaded: dict[tuple[str, int, int], Any] = {}
    for kind, m, d, n in shapes:
        x = rng.standard_normal((m, d)).astype(np.float16)
        if kind in ("gemm", "gemm_t"):
            # (a stream of one shape multiplies one matrix: uploaded once)
            if (kind, d, n) not in uploaded:
                shape = (n, d) if kind == "gemm_t" else (d, n)
                uploaded[kind, d, n] = await dev.upload(rng.standard_normal(shape).astype(np.float16))
            operand = uploaded[kind, d, n]
        elif kind == "e3":
            a = (rng.standard_normal((d, n)) / np.sqrt(d)).astype(np.float16)
            b = (rng.standard_normal((n, d)) / np.sqrt(n)).astype(np.float16)
            operand = await dev.upload_lora(a, b)
        else:
            keys, values = (rng.standard_normal((n, d)).astype(np.float16) for _ in range(2))
            operand = await dev.upload_kv(keys, values, token_major=True)
        desc = _descriptor(kind, m, d, n, operand)
        data = x.tobytes()
        items.append((desc, data + bytes(payload_bytes(desc) - len(data))))
    start = transport.now
    seqs = await queue.submit_many(items)
    completions = [await queue.wait(s) for s in seqs]
    bad = [c for c in completions if c.status != Status.OK]
    if bad:
        raise RuntimeError(f"power workload: seq {bad[0].seq} answered {bad[0].status.name}")
    return [d for d, _ in items], transport.now - start


def acc_lines(p: "Plan", m: int, k: int) -> int:
    """Accumulator lines the PE array writes into the output buffer for a plain stage
    planned `p` with K = k over `m` input rows: each set of each word once (hw/compute_unit.py
    pe_acc_writes; tests/unit/test_compute_unit.py counts them on the RTL). It reads none:
    the partial sums being added into are in the slot registers."""
    return m * p.n_words * sum(p.sets_used(k))


def in_lines(p: "Plan", m: int, k: int, lanes: int) -> int:
    """Input lines the PE array reads for a plain stage planned `p` with K = k over `m`
    input rows (hw/compute_unit.py pe_in_reads; tests/unit/test_compute_unit.py counts them
    on the RTL): a PE row reads a line when its chunk's input line is not the one it holds,
    and the stage's first chunk always does (its rows were just written). A PE row's
    k-groups, q, q + split, .., take lines (g pack) // LANES in order, once per column tile."""
    groups = -(-k // p.pack)
    tiles = len(p.tiles())
    total = 0
    for q in range(p.split):
        seen = len({g * p.pack // lanes for g in range(q, groups, p.split)})
        total += tiles * seen if seen > 1 else seen
    return m * total


def slot_lines(p: "Plan", m: int, k: int) -> tuple[int, int]:
    """(reads, writes) of the PE rows' slot registers for a plain stage planned `p` with
    K = k over `m` input rows (hw/compute_unit.py pe_slot_reads, pe_slot_writes): every chunk
    writes its slot, every chunk but each set's first (one per line the stage writes into
    the output buffer, `acc_lines`) reads it."""
    chunks = m * -(-k // p.pack) * p.n_words
    return chunks - acc_lines(p, m, k), chunks


def activity(cfg: "DeviceConfig", descs: list["Descriptor"]) -> dict[str, int]:
    """The counts the energies multiply (see the module's docstring)."""
    from isa.pe_array import plan, trans_plan
    from isa.validate import dram_traffic
    count = dict.fromkeys(("macs", "chunks", "trans_chunks", "in_line_reads", "acc_line_writes", "slot_accesses",
                           "readout_words",
                           "dram_read_bytes", "dram_write_bytes", "in_buf_line_writes"), 0)
    for desc in descs:
        m = desc.in_rows
        for k, n, transposed in stages(desc):
            count["macs"] += m * k * n
            words = -(-n // cfg.lanes)
            if transposed:          # N rows of K, `pack` rows a chunk; a value per row at its tree's root
                tp = trans_plan(k, cfg.lanes)
                count["trans_chunks"] += m * -(-n // tp.pack) * tp.chunks
                # chunk c of a stored row takes input line c: one line for packed rows, else a
                # line every chunk
                count["in_line_reads"] += m * (1 if tp.chunks == 1 else -(-n // tp.pack) * tp.chunks)
                count["acc_line_writes"] += m * words
            else:                   # K rows of N, `pack` rows a chunk, n_words chunks per k-group
                p = plan(n, cfg.lanes, m)
                count["chunks"] += m * -(-k // p.pack) * p.n_words
                count["acc_line_writes"] += acc_lines(p, m, k)
                count["slot_accesses"] += sum(slot_lines(p, m, k))
                count["in_line_reads"] += in_lines(p, m, k, cfg.lanes)
            count["readout_words"] += m * words
        reads, writes = dram_traffic(cfg, desc)
        count["dram_read_bytes"] += reads
        count["dram_write_bytes"] += writes
        count["in_buf_line_writes"] += -(-m * desc.in_cols * 2 // (cfg.lanes * 2))
    count["dram_buf_lines"] = count["dram_read_bytes"] // (cfg.dram_channels * LINE_BYTES)
    return count


def line_pj(buffers: list[dict[str, Any]], buffer: str, what: str) -> float:
    """Energy (`what`: read_pj or write_pj) of one line access of a buffer, all its macros
    at once (area/sram.py's rows; 0 for a buffer of flip-flops)."""
    rows = [r for r in buffers if r["buffer"] == buffer and r["kind"] == "sram"]
    return rows[0][what] if rows else 0.0


def dram_buffer_beat_pj(cfg: "DeviceConfig", buffers: list[dict[str, Any]]) -> float:
    """Energy of one beat through the DRAM buffer's memory, written and read: its words are
    `pair` beats (hw/fifo.py SyncFIFOSinglePort: pairs of lines, one access moving both), so
    a beat costs that share of a word's write and read. An upper bound: a beat that passes
    through the FIFO's head registers, its memory empty, costs none of it."""
    rows = [r for r in buffers if r["buffer"] == "dram" and r["kind"] == "sram"]
    if not rows:
        return 0.0
    pair = max(1, rows[0]["width"] // cfg.beat_bits)
    return (rows[0]["read_pj"] + rows[0]["write_pj"]) / pair


def energies(cfg: "DeviceConfig", count: dict[str, int], buffers: list[dict[str, Any]]) -> dict[str, float]:
    """Energy (pJ) of each part for activity counts `count` (`activity`)."""
    def line(buffer: str, what: str) -> float:
        return line_pj(buffers, buffer, what)
    return {"pe": count["macs"] * MAC_PJ,
            "input_buffer": count["in_line_reads"] * line("input", "read_pj")
            + count["in_buf_line_writes"] * line("input", "write_pj"),
            "output_buffer": count["acc_line_writes"] * line("output", "write_pj")
            + count["readout_words"] * line("output", "read_pj"),
            "slots": count["slot_accesses"] * 32 * cfg.lanes * FLOP_BIT_PJ,
            "dram_buffer": count["dram_buf_lines"] * dram_buffer_beat_pj(cfg, buffers),
            "dram": (count["dram_read_bytes"] + count["dram_write_bytes"]) * DRAM_PJ_PER_BYTE}


def estimate(cfg: "DeviceConfig", buffers: list[dict[str, Any]], workload: Workload = Workload()) -> dict[str, Any]:
    """Energy and power of `workload` at `cfg`. `buffers`: area/sram.py's rows of this config
    (their energies per line access and leakage). Returns a dict of the counts, cycles,
    energies (pJ) by part, watts and energy per token."""
    workload = workload.fitted(cfg)
    shapes, model = descriptors(workload)
    descs, cycles = asyncio.run(_run(cfg, shapes))
    count = activity(cfg, descs)
    energy = energies(cfg, count, buffers)
    seconds = cycles / cfg.clock_hz
    leakage_w = sum(r["leakage_mw"] for r in buffers) / 1e3
    core_dynamic = sum(v for k, v in energy.items() if k != "dram")
    tokens = workload.batch
    return {"workload": workload.name, "descriptors": len(descs), "cycles": int(cycles), "count": count,
            "energy_pj": energy, "seconds": seconds,
            "pe_w": energy["pe"] * 1e-12 / seconds,
            "buffers_dynamic_w": (core_dynamic - energy["pe"]) * 1e-12 / seconds,
            "buffers_leakage_w": leakage_w,
            "core_w": core_dynamic * 1e-12 / seconds + leakage_w,
            "dram_w": energy["dram"] * 1e-12 / seconds,
            "mac_utilization": count["macs"] / (cycles * cfg.macs),
            # the layer's energy (the core's, leakage over its time included) per token, all layers
            "core_uj_per_token": (core_dynamic * 1e-12 + leakage_w * seconds) * model.layers / tokens * 1e6,
            "dram_uj_per_token": energy["dram"] * 1e-12 * model.layers / tokens * 1e6}


STRESS_COPIES = 4          # descriptors of a stress stream, back to back


def stress_shapes(cfg: "DeviceConfig") -> list[tuple[str, tuple[str, int, int, int]]]:
    """The streams that drive the PE array's buffers hardest, each one descriptor's shape
    (kind, m, K, N) repeated: (what it stresses, shape). A PE row reads an input line only
    when its input line changes and writes an accumulator line only from the last k-group
    of a set (isa/pe_array.py), so the worst are outer products (K of a k-group or two: every
    chunk writes), dot products (N = 1: a new input line every chunk), both at once in
    stages of three chunks, and transposed rows of two lines (a new line every chunk)."""
    lanes, many = cfg.lanes, 16 * cfg.rows      # (many groups of input rows: a long stream)
    wide = min(cfg.n_max, 4 * ACC_SLOTS * lanes)
    return [("outer products, column tiles", ("gemm", many, 1, wide)),
            ("outer products on one input row", ("gemm", 1, 2, wide)),
            ("outer products in the slots", ("gemm", many, 1, ACC_SLOTS * lanes)),
            ("dot products", ("gemm", many, min(cfg.k_max, 64 * lanes), 1)),
            ("dot products of three chunks", ("gemm", many, 3 * lanes, 1)),
            ("three k-groups, three sets", ("gemm", many, 3, lanes)),
            ("transposed rows of two lines", ("gemm_t", many, min(cfg.k_max, 2 * lanes), min(cfg.n_max, 256)))]


def peak(cfg: "DeviceConfig", buffers: list[dict[str, Any]]) -> dict[str, Any]:
    """The power a datasheet quotes as peak (and the paper's 1.17 W for the PEs): every MAC
    busy every cycle at the clock, the buffers (input, output and DRAM buffer, as `energies`
    counts them) at the highest rate a stress stream drives them on the cycle model
    (`stress_shapes`: their energy over the stream's time; the slot registers with them),
    and the leakage. A stream's
    rate is bounded by the DRAM port that feeds it: every chunk is a line of weights read,
    an outer product's sums leave as results, a dot product's inputs arrive as payload."""
    pe = cfg.macs * cfg.clock_hz * MAC_PJ * 1e-12
    streams = {}
    for name, shape in stress_shapes(cfg):
        descs, cycles = asyncio.run(_run(cfg, [shape] * STRESS_COPIES))
        energy = energies(cfg, activity(cfg, descs), buffers)
        buffer_pj = energy["input_buffer"] + energy["output_buffer"] + energy["dram_buffer"] + energy["slots"]
        streams[name] = buffer_pj * 1e-12 * cfg.clock_hz / cycles
    worst = max(streams, key=streams.__getitem__)
    leakage = sum(r["leakage_mw"] for r in buffers) / 1e3
    return {"pe_w": pe, "buffers_dynamic_w": streams[worst], "buffers_leakage_w": leakage,
            "core_w": pe + streams[worst] + leakage, "worst_stream": worst, "streams_w": streams}


def horowitz_line_pj(bits: int, array_bytes: int) -> float:
    """Horowitz's SRAM read energy for `bits` from an array of `array_bytes` (the 8 KB, 32 KB
    and 1 MB points, the nearest at or above): the reference beside CACTI's."""
    for size, key in ((8 << 10, "sram_64b_8kb"), (32 << 10, "sram_64b_32kb"), (1 << 20, "sram_64b_1mb")):
        if array_bytes <= size:
            return bits / 64 * HOROWITZ_PJ[key]
    return bits / 64 * HOROWITZ_PJ["sram_64b_1mb"]


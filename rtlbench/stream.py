"""Random descriptor streams, and one runner for them on any backend.

A stream is a list of batches. A batch's slots are written on all its queues first, then
the doorbells are rung back to back; the host then watches the HEAD registers over
CXL.io and reads the completions, in a random order, once all are done. The same seed
gives the same stream, and the runner only talks to `driver.NdpDevice`, so the model and
the RTL run exactly the same host program.

The host keeps off the DRAM port while the device works: the model does not model the
host's share of the DRAM arbiter, so host reads during a descriptor would show up as
cycle error that is not the model's.
"""
import dataclasses
import json
import random

import numpy as np

from rtlbench.backend import setup_queue

from isa import Descriptor, DescType, Dtype, Flag, Op
from isa.encoders import attention_descriptor, lora_xab_descriptor, softmax_descriptor
from isa.descriptor import PAGE_ALIGN, PAGE_ENTRY_BYTES
from isa.pe_array import ACC_SLOTS
from isa.validate import lines
from rtlbench.paged import paged_descriptor, place_pages

LOG2_DEPTH, LOG2_SLOT = 2, 18
KINDS = ["gemv", "gemm", "load", "store", "softmax", "attention", "xab", "bad", "paged"]
WEIGHTS = [3, 3, 1, 1, 1, 1, 1, 1, 1]
BAD_PAGES = ["entry_unaligned", "entry_outside", "entry_straddles_limit"]
BAD = ["reserved_type", "reserved_op", "softmax_operand", "trans_w", "partial_gemm", "bf16", "unaligned",
       "below_range", "past_range", "size_mismatch", "gemv_rows", "k_mismatch", "zero_dim",
       "attention_half", "xab_d_mismatch"]


@dataclasses.dataclass
class Item:
    queue: int
    kind: str
    m: int = 0
    k: int = 0
    n: int = 0
    bad: str = ""
    seed: int = 0
    partial: bool = False
    trans: bool = False         # TRANS_W: the matrix stored N x K; attention's keys token-major
    page_shift: int = 0         # paged attention: log2 of a page's tokens (its `bad`: a bad list entry)

    def arrays(self):
        """The item's data: (device operands, input), drawn from its seed."""
        rng = np.random.default_rng(self.seed)
        if self.kind in ("load", "store"):
            return _fp16(rng, (self.k, self.n)), None
        if self.kind == "softmax":
            return None, rng.uniform(-16, 16, (self.m, self.n)).astype(np.float16)
        if self.kind in ("attention", "paged"):   # K and V (T x d, a token per row), q
            return ((_fp16(rng, (self.n, self.k)), _fp16(rng, (self.n, self.k))),
                    (rng.standard_normal((self.m, self.k)) / 8).astype(np.float16))
        if self.kind == "xab":                # A (D x R), B (R x D), x
            return (_fp16(rng, (self.k, self.n)), _fp16(rng, (self.n, self.k))), _fp16(rng, (self.m, self.k))
        return _fp16(rng, (self.k, self.n)), _fp16(rng, (self.m, self.k))

    def label(self):
        if self.kind in ("load", "store"):
            return f"{self.kind} {self.k}x{self.n}"
        if self.kind == "bad":
            return f"bad:{self.bad}"
        if self.kind == "paged":
            return f"paged/{1 << self.page_shift}{':' + self.bad if self.bad else ''} {self.m}x{self.k}x{self.n}"
        if self.kind == "softmax":
            return f"softmax{'/p' if self.partial else ''} {self.m}x{self.n}"
        return f"{self.kind}{'^T' if self.trans else ''} {self.m}x{self.k}x{self.n}"


def _dim(rng, top):
    """Small dims often (fixed overheads dominate), up to `top` sometimes."""
    return rng.choice([rng.randint(1, 8), rng.randint(1, 40), rng.randint(1, top)])


def _wide(rng, cfg):
    """Now and then (a fifth of the time) an N of more than ACC_SLOTS words, whose weights
    stream in column tiles (isa/pe_array.py): up to four words more; else 0."""
    if rng.random() >= 0.2:
        return 0
    base = ACC_SLOTS * cfg.lanes
    return rng.randint(base + 1, base + 4 * cfg.lanes)


def generate(seed, count, cfg):
    rng = random.Random(seed)
    batches, made = [], 0
    while made < count:
        pattern = rng.choice(["single", "burst", "queues"])
        if pattern == "single":
            queues = [rng.randrange(cfg.num_queues)]
        elif pattern == "burst":
            queues = [rng.randrange(cfg.num_queues)] * rng.randint(2, 1 << LOG2_DEPTH)
        else:
            queues = [rng.randrange(cfg.num_queues) for _ in range(rng.randint(2, 2 * cfg.num_queues))]
            queues = [q for i, q in enumerate(queues) if queues[:i].count(q) < (1 << LOG2_DEPTH)]
        batch = []
        for q in queues[:count - made]:
            kind = rng.choices(KINDS, weights=WEIGHTS)[0]
            item = Item(q, kind, seed=rng.randrange(1 << 30))
            if kind == "softmax":
                item.m, item.n, item.partial = rng.randint(1, 2 * cfg.rows), _dim(rng, 300), rng.random() < 0.5
            elif kind == "attention":         # m query heads of a group, d, T tokens
                item.m, item.k, item.n = rng.randint(1, cfg.rows + 2), rng.choice([16, 32, 64, 128]), _dim(rng, 200)
                item.trans = rng.random() < 0.5
            elif kind == "paged":             # m query heads, d, T tokens in pages of whole 4 KiB of keys
                item.m, item.k, item.n = rng.randint(1, cfg.rows + 2), rng.choice([32, 64, 128]), _dim(rng, 300)
                item.page_shift = (2048 // item.k).bit_length() - 1 + rng.choice([0, 0, 1, 2])
                item.bad = rng.choice(BAD_PAGES) if rng.random() < 0.2 else ""
            elif kind == "xab":               # batch, D, R
                item.m, item.k, item.n = rng.randint(1, 2 * cfg.rows), _dim(rng, 256), rng.choice([1, 4, 8, 16, 40])
            elif kind == "gemv":
                item.m, item.k, item.n = 1, _dim(rng, 512), _wide(rng, cfg) or _dim(rng, 256)
                item.trans = rng.random() < 0.3
            elif kind == "gemm":
                item.m, item.k, item.n = rng.randint(1, 3 * cfg.rows), _dim(rng, 256), _wide(rng, cfg) or _dim(rng, 200)
                item.trans = rng.random() < 0.3
            elif kind in ("load", "store"):
                item.k, item.n = _dim(rng, 100), _dim(rng, 160)
            else:
                item.bad, item.m, item.k, item.n = rng.choice(BAD), rng.randint(1, 4), _dim(rng, 64), _dim(rng, 64)
            while item.k * item.n > 1 << 16:
                item.k = max(1, item.k // 2)
            batch.append(item)
        made += len(batch)
        batches.append(batch)
    return batches


def to_json(batches):
    return json.dumps([[dataclasses.asdict(item) for item in batch] for batch in batches])


def from_json(text):
    """Batches written by `to_json` (a stream to replay: validate.py --stream)."""
    return [[Item(**item) for item in batch] for batch in json.loads(text)]


def pasid_of(q):
    return 0x100 + q


async def configure(dev, cfg):
    return [await setup_queue(dev, q, pasid=pasid_of(q), log2_depth=LOG2_DEPTH, log2_slot=LOG2_SLOT)
            for q in range(cfg.num_queues)]


def _fp16(rng, shape):
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-3, 3, shape))).astype(np.float16)


async def prepare(dev, queue, item, data):
    """Upload what the item needs; returns (descriptor, payload)."""
    m, k, n = item.m, item.k, item.n
    if item.kind in ("load", "store"):
        array = data[0]
        tensor = await dev.upload(array if item.kind == "load" else np.zeros_like(array), queue=queue)
        desc = Descriptor(type=DescType.LOAD if item.kind == "load" else DescType.STORE, dtype=Dtype.FP16,
                          dev_addr=tensor.addr, dev_size=tensor.size_lines, dev_rows=k, dev_cols=n)
        if item.kind == "load":
            return desc, b""
        desc = dataclasses.replace(desc, in_size=tensor.size_lines, in_rows=k, in_cols=n)
        return desc, array.tobytes()
    if item.kind == "softmax":
        return softmax_descriptor(m, n, item.partial), data[1].tobytes()
    if item.kind == "attention":
        block = await dev.upload_kv(*data[0], queue=queue, token_major=item.trans)
        return attention_descriptor(block, m), data[1].tobytes()
    if item.kind == "paged":
        return await _prepare_paged(dev, queue, item, data)
    if item.kind == "xab":
        adapter = await dev.upload_lora(*data[0], queue=queue)
        return lora_xab_descriptor(adapter, m), data[1].tobytes()
    w, x = data
    # TRANS_W: the same K x N matrix stored N x K
    tensor = await dev.upload(np.ascontiguousarray(w.T) if item.trans else w, queue=queue)
    desc = Descriptor(type=DescType.READ_COMPUTE, op=Op.GEMV if item.kind == "gemv" else Op.GEMM,
                      dtype=Dtype.FP16, flags=Flag.TRANS_W if item.trans else 0, dev_addr=tensor.addr,
                      dev_size=lines(k * n * 2), dev_rows=n if item.trans else k,
                      dev_cols=k if item.trans else n, in_size=lines(m * k * 2), in_rows=m, in_cols=k)
    if item.kind == "bad":
        desc = _break(desc, item.bad, queue)
    return desc, x.tobytes()


async def _prepare_paged(dev, queue, item, data):
    """A paged ATTENTION (rtlbench/paged.py); `item.bad` spoils one entry of its list."""
    (k, v), q = data
    spoil = None
    if item.bad:
        count = -(-item.n // (1 << item.page_shift))
        index = item.seed % count
        spoil = (index, {"entry_unaligned": None, "entry_outside": queue.data_base - PAGE_ALIGN * (1 + item.seed % 4),
                         "entry_straddles_limit": queue.data_limit - PAGE_ALIGN}[item.bad])
    list_addr, placed = await place_pages(dev, queue, k, v, item.page_shift)
    if spoil is not None:
        address = placed[spoil[0]] + 64 * (1 + item.seed % 63) if spoil[1] is None else spoil[1]
        await dev.transport.mem_write(list_addr + PAGE_ENTRY_BYTES * spoil[0], address.to_bytes(8, "little"),
                                      queue.pasid)
    return paged_descriptor(list_addr, item.n, item.k, item.page_shift, item.m), q.tobytes()


def _break(desc, how, queue):
    r = dataclasses.replace
    return {
        "reserved_type": lambda: r(desc, type=DescType.RESERVED),
        "reserved_op": lambda: r(desc, op=11),
        "softmax_operand": lambda: r(desc, op=Op.SOFTMAX),
        "trans_w": lambda: r(desc, flags=Flag.TRANS_W),
        "partial_gemm": lambda: r(desc, flags=Flag.PARTIAL),
        "attention_half": lambda: r(desc, op=Op.ATTENTION),          # dev_size covers K^T only
        "xab_d_mismatch": lambda: r(desc, op=Op.LORA_XAB, dev_size=2 * desc.dev_size,
                                    in_cols=desc.in_cols + 1, in_size=lines(desc.in_rows * (desc.in_cols + 1) * 2)),
        "bf16": lambda: r(desc, dtype=Dtype.BF16),
        "unaligned": lambda: r(desc, dev_addr=desc.dev_addr + 2),
        "below_range": lambda: r(desc, dev_addr=queue.data_base - 4096),
        "past_range": lambda: r(desc, dev_addr=queue.data_limit - 64),
        "size_mismatch": lambda: r(desc, dev_size=desc.dev_size + 1),
        "gemv_rows": lambda: r(desc, op=Op.GEMV, in_rows=2, in_size=lines(2 * desc.in_cols * 2)),
        "k_mismatch": lambda: r(desc, in_cols=desc.in_cols + 1, in_size=lines(desc.in_rows * (desc.in_cols + 1) * 2)),
        "zero_dim": lambda: r(desc, in_rows=0, in_size=0),
    }[how]()


def bench_batches():
    """The speed benchmark's stream: medium GEMVs and GEMMs, a load and a store, one
    descriptor at a time, about 110k device cycles on the default config."""
    items = [Item(0, "gemv", 1, 1024, 512), Item(1, "gemm", 8, 1024, 256), Item(2, "gemv", 1, 2048, 256),
             Item(3, "load", 0, 256, 256), Item(0, "gemm", 4, 512, 512), Item(1, "store", 0, 128, 256),
             Item(2, "gemv", 1, 4096, 64), Item(3, "gemm", 16, 256, 64)]
    for i, item in enumerate(items):
        item.seed = i
    return [[item] for item in items]


def draw(batches):
    """Every item's data, drawn ahead (so that a timed run does not time the drawing)."""
    return [[item.arrays() for item in batch] for batch in batches]


async def run(dev, queues, batches, seed=0, poll_cycles=32, data=None):
    """Run the stream; returns one record per descriptor, in stream order."""
    rng = random.Random(seed)
    records = []
    data = data or draw(batches)
    for batch, batch_data in zip(batches, data):
        prepared = [await prepare(dev, queues[item.queue], item, d) for item, d in zip(batch, batch_data)]
        by_queue = {}
        for i, item in enumerate(batch):
            by_queue.setdefault(item.queue, []).append(i)
        seqs = {}
        for q, indices in by_queue.items():
            got = await queues[q].submit_many([prepared[i] for i in indices], ring=False)
            seqs.update(zip(indices, got))
        for q in by_queue:
            await queues[q].ring()
        for q, indices in by_queue.items():
            last = max(seqs[i] for i in indices) & 0xFFFFFFFF
            while await queues[q].read_head() != last:
                await dev.transport.wait_cycles(poll_cycles)
        order = list(range(len(batch)))
        rng.shuffle(order)
        done = {}
        for i in order:
            done[i] = await queues[batch[i].queue].wait(seqs[i])
        for i, item in enumerate(batch):
            c = done[i]
            records.append({"label": item.label(), "queue": item.queue, "seq": c.seq,
                            "status": c.status.name, "cycles": c.cycles, "result": c.result.hex()})
        for queue in queues:
            queue.free_all()
    return records

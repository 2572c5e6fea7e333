"""Descriptor fuzzing: random 204-bit words through a backend of the scenarios (the model,
or the RTL on either top), each checked against the status the decode rules predict
(`isa.check_descriptor`), with no hang (the driver's timeout) and no byte written where the
descriptor may not write.

The words are of three kinds, so that every rule is reached, not only BAD_OP (a uniform
204-bit word has a reserved type or op 3 times in 4):
- uniform: all 204 bits random;
- well formed: an implemented op with consistent sizes, its shape from a class (1, small,
  LANES - 1, LANES, LANES + 1, the buffers' k_max / n_max and one past them), its operand
  somewhere in the queue's data range or just outside it;
- mutated: a well-formed word with one to three of its bits flipped.

Paged ATTENTION lists: the first 4 KiB of each data range hold LIST_POOL lists of
PAGE_LIST_MAX entries, 4 KiB-aligned pages inside the range (the last list with one entry
off 4 KiB); a well-formed paged word points at one of them mostly, else anywhere (random
bytes: BAD_PAGE, almost surely). Its expected status is the decode rules' and then, read
from the shadow of the data range as the queue's earlier STOREs left it, the list's
(`isa.validate.check_pages`).

Memory: the queues' rings and data ranges live in a window of DRAM whose every byte is set
to a random pattern first. Afterwards the window must be as before except the rings (the
host writes the submissions, the device the completions) and, in each data range, exactly
the bytes the OK STOREs were to write there, in order: a shadow copy of each data range
follows them.
"""
import dataclasses

import numpy as np

import isa
from isa import Descriptor, DescType, Dtype, Flag, Op, Status
from isa.descriptor import DESC_BITS, PAGE_ALIGN, page_flags
from isa.microarch import PAGE_LIST_MAX
from isa.pe_array import ACC_SLOTS
from isa.validate import PAGE_LIST_BYTES, QueueView, check_pages, lines, page_count, paged

SPAN = 1 << 22                    # queue q's part of the window: [q * SPAN, (q + 1) * SPAN)
SQ, CQ, DATA, DATA_END = 0, 1 << 20, 2 << 20, 3 << 20       # offsets in it; a guard after
LOG2_DEPTH, LOG2_SLOT = 3, 14
TIMEOUT_CYCLES = 2_000_000
KINDS = ("uniform", "well_formed", "mutated")
KIND_P = (0.2, 0.4, 0.4)
MAX_WORK = 1 << 16                # K x N of a well-formed product, but for the corner shapes
LIST_POOL = 8                     # paged lists at the start of each data range
PAGE_SPAN_MAX = 64 << 10          # the pages' bytes (keys and values) of a well-formed paged word


@dataclasses.dataclass
class Case:
    desc: Descriptor
    kind: str
    shape_class: str
    expected: Status
    payload: bytes


@dataclasses.dataclass
class FuzzResult:
    count: int = 0
    by_status: dict = dataclasses.field(default_factory=dict)
    by_kind: dict = dataclasses.field(default_factory=dict)
    cycles: int = 0

    def line(self, name):
        statuses = " ".join(f"{Status(s).name}={n}" for s, n in sorted(self.by_status.items()))
        return f"fuzz backend={name} descriptors={self.count} {statuses} mismatches=0 bytes_outside=0"


def queue_view(cfg, q):
    base = q * SPAN
    return QueueView(LOG2_SLOT, base + DATA, base + DATA_END)


def shape_classes(cfg):
    """Dimension classes and a value of each, for K (the reduced dim) and N."""
    lanes = cfg.lanes
    return {"one": lambda rng: 1, "small": lambda rng: int(rng.integers(2, lanes - 1)),
            "lanes-1": lambda rng: lanes - 1, "lanes": lambda rng: lanes, "lanes+1": lambda rng: lanes + 1,
            # (as N: more words than ACC_SLOTS, the weights in column tiles)
            "tiles": lambda rng: min(ACC_SLOTS * lanes + int(rng.integers(1, 4 * lanes)), cfg.n_max),
            "k_max": lambda rng: cfg.k_max, "k_max+1": lambda rng: cfg.k_max + 1,
            "n_max": lambda rng: cfg.n_max, "n_max+1": lambda rng: cfg.n_max + 1}


OP_KINDS = ("load", "store", "gemv", "gemm", "gemv_t", "gemm_t", "softmax", "softmax_p",
            "attention", "attention_t", "lora_xab", "attention_paged")


def well_formed(rng, cfg, view, op_kind=None):
    """An implemented op (`op_kind`, one of OP_KINDS, or drawn) with consistent sizes and
    its shape class."""
    classes = shape_classes(cfg)
    names = list(classes)
    if op_kind is None:
        op_kind = rng.choice(OP_KINDS)
    if op_kind == "attention_paged":
        return paged_word(rng, cfg, view)
    shape_class = str(rng.choice(names))
    dim = classes[shape_class](rng)
    other = int(rng.integers(1, 2 * cfg.lanes + 2))
    k, n = (dim, other) if rng.random() < 0.5 else (other, dim)
    if k * n > MAX_WORK:              # a corner shape: the other dim at 1 keeps the run short
        k, n = (k, 1) if k >= n else (1, n)
    m = int(rng.choice([1, 1, 2, cfg.rows, cfg.rows + 1, int(rng.integers(1, 3 * cfg.rows + 1))]))
    fields = dict(dtype=Dtype.FP16)
    if op_kind in ("load", "store"):
        rows_, cols_ = m, k
        fields.update(type=DescType.LOAD if op_kind == "load" else DescType.STORE, op=0,
                      dev_rows=rows_, dev_cols=cols_, dev_size=lines(rows_ * cols_ * 2))
        if op_kind == "store":
            fields.update(in_rows=rows_, in_cols=cols_, in_size=lines(rows_ * cols_ * 2))
    elif op_kind.startswith("softmax"):
        fields.update(op=Op.SOFTMAX, in_rows=m, in_cols=k, in_size=lines(m * k * 2),
                      flags=Flag.PARTIAL if op_kind == "softmax_p" else 0)
    else:
        trans = op_kind.endswith("_t")
        op = {"gemv": Op.GEMV, "gemm": Op.GEMM, "attention": Op.ATTENTION, "lora_xab": Op.LORA_XAB}[
            op_kind.removesuffix("_t")]
        if op == Op.GEMV:
            m = 1
        rows_, cols_ = (n, k) if trans else (k, n)
        if op == Op.ATTENTION:          # K^T d x T (or K token-major T x d), then V T x d
            d, t = k, n
            rows_, cols_ = (t, d) if trans else (d, t)
        size = lines(rows_ * cols_ * 2) * (2 if op in (Op.ATTENTION, Op.LORA_XAB) else 1)
        fields.update(op=op, flags=Flag.TRANS_W if trans else 0, dev_rows=rows_, dev_cols=cols_,
                      dev_size=size, in_rows=m, in_cols=k, in_size=lines(m * k * 2))
    desc = Descriptor(type=fields.pop("type", DescType.READ_COMPUTE), **fields)
    if desc.dev_size:
        desc = dataclasses.replace(desc, dev_addr=operand_addr(rng, desc, view))
    return desc, shape_class


def paged_word(rng, cfg, view):
    """A paged ATTENTION: d of 32, 64 or 128, pages of whole 4 KiB of keys (PAGE_SPAN_MAX
    a page at most), up to 8 pages (or, a corner, PAGE_LIST_MAX + 1), its list one of the
    pool's mostly."""
    d = int(rng.choice([32, 64, 128]))
    shift = (2048 // d).bit_length() - 1 + int(rng.integers(0, 3))
    while (1 << shift) * d * 4 > PAGE_SPAN_MAX:
        shift -= 1
    pages = PAGE_LIST_MAX + 1 if rng.random() < 0.05 else int(rng.integers(1, 9))
    tokens = int(rng.integers((pages - 1) << shift, pages << shift)) + 1
    m = int(rng.choice([1, 2, cfg.rows, cfg.rows + 1]))
    where = rng.random()
    if where < 0.8:
        list_addr = view.data_base + PAGE_LIST_BYTES * int(rng.integers(0, LIST_POOL))
    elif where < 0.95:
        list_addr = view.data_base + PAGE_LIST_BYTES * int(rng.integers(0, (view.data_limit - view.data_base)
                                                                         // PAGE_LIST_BYTES))
    else:
        list_addr = view.data_base + 64                  # a line, not 512 bytes: BOUNDS
    desc = Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16, flags=page_flags(shift),
                      dev_addr=list_addr, dev_size=lines(pages * 8), dev_rows=tokens, dev_cols=d,
                      in_rows=m, in_cols=d, in_size=lines(m * d * 2))
    return desc, f"paged/{1 << shift}"


def list_pool(rng, view):
    """The pool's lists (bytes, at the data range's start): entries at 4 KiB in the range,
    room for PAGE_SPAN_MAX after each; the last list's entry 3 off 4 KiB."""
    first, last = (view.data_base + (4 << 10)) // PAGE_ALIGN, (view.data_limit - PAGE_SPAN_MAX) // PAGE_ALIGN
    entries = rng.integers(first, last + 1, size=(LIST_POOL, PAGE_LIST_MAX)) * PAGE_ALIGN
    entries[-1, 3] += 64
    return entries.astype("<u8").tobytes()


def operand_addr(rng, desc, view):
    """Inside the data range, mostly; else at its edges or outside it, or unaligned."""
    nbytes = desc.dev_size * 64
    room = (view.data_limit - view.data_base - nbytes) // 64
    where = rng.random()
    if where < 0.8 and room >= 0:
        return view.data_base + 64 * int(rng.integers(0, room + 1))
    if where < 0.87:
        return view.data_limit - nbytes + 64            # its last line past the limit
    if where < 0.94:
        return max(view.data_base - 64, 0)
    return view.data_base + 32                          # unaligned


def mutate(rng, desc):
    word = desc.to_int()
    for bit in rng.choice(DESC_BITS, size=int(rng.integers(1, 4)), replace=False):
        word ^= 1 << int(bit)
    return Descriptor.from_int(word)


def cases(cfg, seed, count):
    """`count` Cases per queue in turn, deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    views = [queue_view(cfg, q) for q in range(n_queues(cfg))]
    for i in range(count):
        view = views[i % len(views)]
        kind = str(rng.choice(KINDS, p=KIND_P))
        shape_class = "-"
        if kind == "uniform":
            desc = Descriptor.from_int(int.from_bytes(rng.bytes(26), "little") & ((1 << DESC_BITS) - 1))
        else:
            desc, shape_class = well_formed(rng, cfg, view)
            if kind == "mutated":
                desc = mutate(rng, desc)
        expected = isa.check_descriptor(desc, view, cfg)
        if expected == Status.OK and paged(desc):
            expected = None             # the list's verdict: from the memory when it runs (`run`)
        nbytes = desc.in_size * 64
        payload = rng.bytes(nbytes) if nbytes <= view.slot_bytes - 64 else b""
        yield Case(desc, kind, shape_class, expected, payload)


def n_queues(cfg):
    return min(cfg.num_queues, 4)


async def run(env, count, seed=1, on_case=None):
    """Fuzz `count` descriptors through `env` (a backend of rtlbench/backend.py, started);
    raises AssertionError at the first mismatch. `on_case(case, completion)` sees each."""
    cfg, dev = env.cfg, env.dev
    nq = n_queues(cfg)
    window = nq * SPAN
    rng = np.random.default_rng(seed + 1)
    before = np.frombuffer(rng.bytes(window), np.uint8).copy()
    for q in range(nq):
        pool = np.frombuffer(list_pool(rng, queue_view(cfg, q)), np.uint8)
        before[q * SPAN + DATA:q * SPAN + DATA + len(pool)] = pool
    env.backdoor_write(0, before.tobytes())
    queues = []
    for q in range(nq):
        base = q * SPAN
        queues.append(await dev.configure_queue(q, sq_base=base + SQ, cq_base=base + CQ, data_base=base + DATA,
                                                data_limit=base + DATA_END, log2_depth=LOG2_DEPTH,
                                                log2_slot=LOG2_SLOT))
    shadow = {q: before[q * SPAN + DATA:q * SPAN + DATA_END].copy() for q in range(nq)}
    result = FuzzResult()
    pending = [[] for _ in range(nq)]
    depth = 1 << LOG2_DEPTH

    def list_status(q, case):
        """A paged word's list verdict, from the data range as the queue's STOREs left it."""
        view = queue_view(cfg, q)
        at = case.desc.dev_addr - view.data_base
        raw = shadow[q][at:at + 8 * page_count(case.desc)].tobytes()
        entries = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
        return check_pages(case.desc, entries, view, cfg)

    async def drain(q):
        for seq, case in pending[q]:
            if case.expected is None:
                case.expected = list_status(q, case)
            completion = await queues[q].wait(seq, TIMEOUT_CYCLES)
            if completion.status != case.expected:
                raise AssertionError(f"queue {q} seq {seq}: {completion.status.name}, the decode rules say "
                                     f"{case.expected.name} for {case.kind} {case.desc!r}")
            if case.expected == Status.OK and case.desc.type == DescType.STORE:
                start = case.desc.dev_addr - (q * SPAN + DATA)
                shadow[q][start:start + len(case.payload)] = np.frombuffer(case.payload, np.uint8)
            result.count += 1
            result.by_status[int(completion.status)] = result.by_status.get(int(completion.status), 0) + 1
            result.by_kind[case.kind] = result.by_kind.get(case.kind, 0) + 1
            result.cycles += completion.cycles
            if on_case is not None:
                on_case(case, completion)
        pending[q] = []

    for i, case in enumerate(cases(cfg, seed, count)):
        q = i % nq
        [seq] = await queues[q].submit_many([(case.desc, case.payload)])
        pending[q].append((seq, case))
        if len(pending[q]) == depth:
            await drain(q)
    for q in range(nq):
        await drain(q)

    after = np.frombuffer(env.backdoor_read(0, window), np.uint8)
    for q in range(nq):
        base = q * SPAN
        allowed = [(base + SQ, base + SQ + (depth << LOG2_SLOT)), (base + CQ, base + CQ + (depth << LOG2_SLOT))]
        data = after[base + DATA:base + DATA_END]
        if not np.array_equal(data, shadow[q]):
            first = int(np.flatnonzero(data != shadow[q])[0])
            raise AssertionError(f"queue {q}: data range byte {base + DATA + first:#x} written by no OK STORE")
        for lo, hi in [(base, base + SQ)] + [(allowed[0][1], base + CQ), (allowed[1][1], base + DATA),
                                             (base + DATA_END, base + SPAN)]:
            if lo < hi and not np.array_equal(after[lo:hi], before[lo:hi]):
                first = lo + int(np.flatnonzero(after[lo:hi] != before[lo:hi])[0])
                raise AssertionError(f"byte {first:#x} outside every ring and data range was written")
    return result

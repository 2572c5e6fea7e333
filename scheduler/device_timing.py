"""Device time of one NDP descriptor for the scheduler's cost model, from the cycle model.

The project's rule: a device time comes from the cycle-approximate model of sim/, never a
second guess. Running the model for every candidate the scheduler ranks would be too slow,
so `DeviceTiming` keeps a table of model runs per (op, fixed dims), measured lazily at a
few points of the varying dim, interpolated between them and cached on disk.

    timing = DeviceTiming(isa.load_config("paper"))
    timing.lora_xa(b, d_in, r)     # E4: m = x A, one GEMM (b x d_in times d_in x r)
    timing.lora_xab(b, d, r)       # E3: y = (x A) B, one LORA_XAB descriptor (square D)
    timing.attention(rows, d, t)   # one ATTENTION descriptor: rows query heads, one KV head
    timing.attention_share(rows, d, page, t)   # one paged ATTENTION: t tokens in pages of `page`
    timing.gemm(m, k, n)           # any GEMM descriptor
All return seconds of device time (completion cycles / clock_hz) of one descriptor, from
the cycle the device sees the descriptor to the cycle it issues its completion: the
isolated latency, what one descriptor on an idle device takes (Fig. 3a, Table IV).

A device runs a queue of descriptors back to back: it decodes and reads the next while the
current one computes, one pipeline, completions in order. `timing.stream(op, *dims)` gives
(period, drain) in seconds: the spacing of that shape's completions in a back-to-back run
of copies, and what the last of a stream takes after its own period (from the doorbell of an
idle device, a stream of one is period + drain). A stream of any shapes s_1..s_n then takes

    stream_s = sum_i period(s_i) + drain(s_n)

(`stream_seconds`): measured on mixed streams of attention pages, GQA groups, GEMMs and
LORA_XAB chains within 0.1 % (`check`; `make timing-check`). Periods come from a run of
STREAM_COPIES copies on one queue, one doorbell: (t_last - t_2) / (copies - 2), the first
paying the pipeline's fill; the drain makes the formula exact for the run. A shape
the device cannot run raises isa.errors.ShapeError naming the limit; without exceptions,
`timing.feasible(op, *dims)` says whether it runs and `why_infeasible(cfg, op, *dims)`
returns that message (or None). `timing.cycles(op, *dims)` is the table in cycles,
`timing.measure(op, *dims)` / `measure_cycles` one direct model run (no table).

Why the interpolation is nearly exact (docs/model.md, sim/control_unit.py): the control
unit runs the input in groups of cfg.rows rows and streams the whole weight operand once
per group, so with the weights fixed the time is affine in the number of groups
G = ceil(b / rows) (measured: equal steps per group to a cycle). A last group with fewer
rows only shortens that group's input phase and readout, by an amount that does not depend
on G. One input row in all (b == 1) is a different plan (k-groups split over two PE rows,
isa/pe_array.py) and gets its own point. So for batch ops:
    t(b) = lerp over G between the full-group points b = rows * 2^i bracketing G
           + (t(rows + j) - t(2 rows))  when the last group has j < rows rows.
Attention (and a paged share, whose pages stream as one operand's) varies with the token
count t instead: t is the second product's K and the first
product's N, whose packing (pack = lanes / t rounded down to a power of two) changes at the
powers of two below `lanes`, and whose words (ceil(t / lanes): PE words, readout words,
softmax words) step up past each multiple of `lanes`. Between two such knots the time is
linear in t up to a few cycles (the last k-group of the second product), so t is
interpolated linearly between lo + 1 and hi, the first and last t of its segment (lo, hi].
A paged share also steps at each page (a run and a list entry more), so its knots are
those and the multiples of the page.

`python -m scheduler.device_timing --config paper --samples 40 --seed 1` checks the tables
against direct model runs on random shapes of the scheduler's domain, and the stream
formula against random mixed streams.
"""
import argparse
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

import isa
from driver import NdpDevice
from driver.errors import OutOfDeviceMemory
from driver.model_transport import ModelTransport
from driver.queue import Completion, Queue
from isa import Status, slots
from isa.config import DeviceConfig
from isa.descriptor import Descriptor
from isa.encoders import (
    DeviceTensor,
    KvBlock,
    LoraAdapter,
    attention_descriptor,
    lora_xab_descriptor,
    matmul_descriptor,
    paged_attention_descriptor,
)
from isa.errors import ShapeError
from isa.microarch import PAGE_LIST_MAX
from isa.slots import HEADER_BYTES, LINE_BYTES
from isa.validate import QueueView, check_descriptor, payload_bytes, result_bytes

log = logging.getLogger(__name__)      # progress: the model runs a lookup makes, and each save of the table
_T = TypeVar("_T")
Shape = tuple[Any, ...]         # (op, *dims): one descriptor of a stream

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT / "build" / "timing"
CACHE_ENV = "NDP_TIMING_CACHE"
# the sources whose change may change a cycle count: the model, its definitions, and the
# way this module lays out and runs a measurement
MODEL_SOURCES = ("sim/*.py", "isa/*.py", "driver/*.py", "scheduler/device_timing.py")

OPS = ("gemm", "lora_xa", "lora_xab", "attention", "attention_share")
TOKEN_OPS = ("attention", "attention_share")      # tabled over their last dim, the tokens
ARITY = {"attention_share": 4}                    # rows, d, page, t; the others three dims
STREAM_COPIES = 6           # a stream table point's run: the first pays the fill, then 4 periods
# the scheduler's domain (seed 000: Llama2-7B/13B, Llama3-8B, Qwen3-30B; LoRA on every weight
# matrix, ranks 8..128; MHA and GQA with head dims 64 and 128), for the check
D_MODEL = (2048, 4096, 5120, 8192)                       # hidden sizes: square adapters (E3)
D_IN = (1024, 2048, 4096, 5120, 8192, 11008, 13824, 14336)   # any A's input dim (E4): + KV, FFN
RANKS = (8, 16, 32, 64, 128)
HEAD_ROWS, HEAD_DIMS, MAX_TOKENS, MAX_BATCH = (1, 4, 8), (64, 128), 8192, 256
PAGES = (16, 32, 64, 128)                                # KV page sizes (tokens)


def why_infeasible(cfg: DeviceConfig, op: str, *dims: int) -> str | None:
    """None if `op` on `dims` (see DeviceTiming) is one descriptor the device runs, else
    the limit it breaks, as a message."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {OPS}")
    arity = ARITY.get(op, 3)
    if len(dims) != arity or any(not isinstance(x, (int, np.integer)) or x < 1 for x in dims):
        return f"{op} needs {arity} dims >= 1, got {dims!r}"
    if op == "attention_share" and dims[2] & (dims[2] - 1):
        return f"{op} {dims}: the page, {dims[2]} tokens, is not a power of two"
    try:        # the descriptor's field widths (in_rows, in_size, dev_size: 20 bits), a share's pages
        desc = _descriptor(op, dims, 0)
    except ValueError as exc:
        return f"{op} {dims}: does not fit a descriptor: {exc}"
    # the device's own decode rules decide (isa/validate.py); slots are sized to the shape
    status = check_descriptor(desc, QueueView(slots.MAX_LOG2_RING, 0, 1 << 64), cfg)
    if status == Status.OK:
        return None
    k, n = dims[1], dims[-1]                 # say which limit: each product's K and N (shape_ok)
    if op == "lora_xab":        # b, D, R: X A (K = D, N = R), then H B (K = R, N = D)
        products: list[tuple[int, int, str]] = [(k, n, " (x A)"), (n, k, " (second product, (x A) B)")]
    elif op in TOKEN_OPS:       # rows, d, (page,) t: q K^T (K = d, N = t), then S V (K = t, N = d)
        products = [(k, n, " (q K^T)"), (n, k, " (second product, S V)")]
    else:
        products = [(k, n, "")]
    for pk, pn, what in products:
        if pk > cfg.k_max:
            return f"{op} {dims}: K={pk}{what} exceeds k_max={cfg.k_max} of config {cfg.name!r}"
        if pn > cfg.n_max:
            return f"{op} {dims}: N={pn}{what} exceeds n_max={cfg.n_max} of config {cfg.name!r}"
    return f"{op} {dims}: the device answers {status.name}"


def _descriptor(op: str, dims: Sequence[int], addr: int) -> Descriptor:
    if op == "attention_share":
        rows, d, page, t = dims
        return paged_attention_descriptor(addr, t, d, page.bit_length() - 1, rows)
    m, k, n = dims
    if op == "lora_xab":
        return lora_xab_descriptor(LoraAdapter(addr, k, n), m)
    if op == "attention":
        return attention_descriptor(KvBlock(addr, k, n), m)
    return matmul_descriptor(isa.Op.GEMM, DeviceTensor(addr, k, n), m)


def model_hash() -> str:
    digest = hashlib.sha256()
    for pattern in MODEL_SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(cfg: DeviceConfig, sources: str | None = None) -> str:
    """What a cached table is valid for: every field of the config and the model's sources."""
    fields = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    return hashlib.sha256((fields + (sources or model_hash())).encode()).hexdigest()[:20]


def _drive(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a driver coroutine on ModelTransport to its end. That transport never waits on
    anything outside itself, so no event loop is needed (and this works inside one)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the driver suspended on the model transport")


class DeviceTiming:
    def __init__(self, cfg: DeviceConfig, cache_dir: str | pathlib.Path | None = None) -> None:
        self.cfg = cfg
        folder = pathlib.Path(cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
        self.sources = model_hash()
        self.key = cache_key(cfg, self.sources)
        self.path = folder / f"{cfg.name}-{self.key}.json"
        # "op d1 d2" -> {varying dim: cycles, or [period, drain] in a stream table}
        self.tables: dict[str, dict[int, Any]] = {}
        self.model_runs = 0         # model runs made by this instance (the tests count them)
        self._dev: NdpDevice | None = None
        self._log2_slot: int | None = None
        self._queue: Queue | None = None
        try:
            saved = json.loads(self.path.read_text())
            if saved.get("key") == self.key:
                self.tables = {name: {int(x): c for x, c in points.items()}
                               for name, points in saved["tables"].items()}
        except (OSError, ValueError, KeyError):
            pass                    # no cache yet, or an unreadable one: measure again

    # ---- the scheduler's API: seconds of one descriptor ---------------------------------

    def lora_xa(self, b: int, d_in: int, r: int) -> float:
        """LoRA E4, m = x A: one GEMM (b x d_in times d_in x r), as driver lora_xa sends it
        (GEMM also for b == 1)."""
        return self.seconds("lora_xa", b, d_in, r)

    def lora_xab(self, b: int, d: int, r: int, d_out: int | None = None) -> float:
        """LoRA E3, y = (x A) B: one LORA_XAB descriptor (A d x r, B r x d); the device
        has no E3 for d_out != d."""
        if d_out is not None and d_out != d:
            raise ShapeError(f"lora_xab needs a square adapter: LORA_XAB computes y = (x A) B "
                             f"with A D x R and B R x D, got d_in={d} != d_out={d_out}")
        return self.seconds("lora_xab", b, d, r)

    def attention(self, rows: int, d: int, t: int) -> float:
        """One ATTENTION descriptor: `rows` query heads sharing one KV head of head dim d,
        t tokens of it on this device."""
        return self.seconds("attention", rows, d, t)

    def attention_share(self, rows: int, d: int, page: int, t: int) -> float:
        """One paged ATTENTION descriptor: `rows` query heads over t tokens of one KV head
        of head dim d on this device, in pages of `page` tokens (one list, at most
        PAGE_LIST_MAX pages)."""
        return self.seconds("attention_share", rows, d, page, t)

    def gemm(self, m: int, k: int, n: int) -> float:
        return self.seconds("gemm", m, k, n)

    def feasible(self, op: str, *dims: int) -> bool:
        """Whether the device runs `op` on `dims` as one descriptor (why_infeasible says why not)."""
        return why_infeasible(self.cfg, op, *dims) is None

    def seconds(self, op: str, *dims: int) -> float:
        return self.cycles(op, *dims) / self.cfg.clock_hz

    def measure(self, op: str, *dims: int) -> float:
        """Seconds of one direct model run (no table)."""
        return self.measure_cycles(op, *dims) / self.cfg.clock_hz

    def stream(self, op: str, *dims: int) -> tuple[float, float]:
        """(period, drain) in seconds of `op` on `dims` in a back-to-back stream (the
        module docstring: a stream takes the sum of its periods plus its last one's drain)."""
        period, drain = self.stream_cycles(op, *dims)
        return period / self.cfg.clock_hz, drain / self.cfg.clock_hz

    def stream_seconds(self, shapes: Sequence[Shape]) -> float:
        """Seconds a back-to-back stream of `shapes` ((op, *dims) each, in queue order) takes
        on one device, from its doorbell on an idle device to its last completion."""
        total = 0.0
        drain = 0.0
        for op, *dims in shapes:
            period, drain = self.stream(op, *dims)
            total += period
        return total + drain

    # ---- the tables -----------------------------------------------------------------------

    def cycles(self, op: str, *dims: int) -> float:
        """Device cycles of `op` on `dims` from the latency table (a float: interpolated),
        measuring on the model the points it lacks and saving them."""
        return float(self._lookup("", op, dims))

    def stream_cycles(self, op: str, *dims: int) -> tuple[float, float]:
        """(period, drain) in cycles from the stream table, as `cycles` does for latency."""
        period, drain = self._lookup("stream ", op, dims).tolist()
        return period, drain

    def _lookup(self, table: str, op: str, shape: Sequence[int]) -> npt.NDArray[np.float64]:
        self._check(op, shape)
        dims, op = tuple(int(x) for x in shape), "gemm" if op == "lora_xa" else op
        before = self.model_runs
        if op in TOKEN_OPS:
            value = self._tokens(table, op, dims)
        else:
            value = self._batch(table, op, dims)
        if self.model_runs != before:
            log.info("%s table, %s on %s: %d missing points measured on the model", table.strip() or "latency",
                     op, self.cfg.name, self.model_runs - before)
            self._save()
        return value

    def _point(self, table: str, op: str, fixed: tuple[int, ...], x: int) -> npt.NDArray[np.float64]:
        """The table's point at varying dim x (b, or attention's t), measured now if missing:
        a number of cycles in the latency table (""), [period, drain] in the stream table."""
        points = self.tables.setdefault(f"{table}{op} " + " ".join(str(f) for f in fixed), {})
        if x not in points:
            dims = (*fixed, x) if op in TOKEN_OPS else (x, *fixed)
            points[x] = self.measure_cycles(op, *dims) if not table else list(self.measure_stream(op, *dims))
        return np.asarray(points[x], dtype=np.float64)

    def _batch(self, table: str, op: str, dims: tuple[int, ...]) -> npt.NDArray[np.float64]:
        b, fixed, rows = dims[0], dims[1:], self.cfg.rows
        if b == 1:
            return self._point(table, op, fixed, 1)     # the split plan: a point of its own
        groups = -(-b // rows)
        last = b - rows * (groups - 1)                  # rows in the last group
        lo = 1 << (groups.bit_length() - 1)             # the powers of two bracketing G
        value = self._lerp(table, op, fixed, groups, lo, groups if lo == groups else 2 * lo, scale=rows)
        if last < rows:
            value = value + self._point(table, op, fixed, rows + last) - self._point(table, op, fixed, 2 * rows)
        return value

    def _tokens(self, table: str, op: str, dims: tuple[int, ...]) -> npt.NDArray[np.float64]:
        t, fixed, lanes = dims[-1], dims[:-1], self.cfg.lanes
        # t's segment (lo, hi] between knots: the powers of two up to lanes, then the
        # multiples of lanes (and a share's page multiples); interpolated between its first
        # and last t
        hi = 1 << (t - 1).bit_length() if t <= lanes else -(-t // lanes) * lanes
        lo = hi // 2 if t <= lanes else hi - lanes
        if op == "attention_share":
            page = fixed[2]
            hi, lo = min(hi, -(-t // page) * page), max(lo, (t - 1) // page * page)
        return self._lerp(table, op, fixed, t, min(lo + 1, hi), hi)

    def _lerp(self, table: str, op: str, fixed: tuple[int, ...], x: int, lo: int, hi: int, scale: int = 1
              ) -> npt.NDArray[np.float64]:
        """Linear in x between the points at scale * lo and scale * hi (exact at both)."""
        y_lo = self._point(table, op, fixed, scale * lo)
        if x == lo:
            return y_lo
        y_hi = self._point(table, op, fixed, scale * hi)
        return y_lo + (y_hi - y_lo) * (x - lo) / (hi - lo)

    def _save(self) -> None:
        """Merge this instance's points into the cache file; written to a temporary file
        and renamed, so that a reader (or a concurrent writer) never sees half a file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tables: dict[str, dict[str, Any]] = {}
        try:
            saved = json.loads(self.path.read_text())
            if saved.get("key") == self.key:
                tables = saved["tables"]
        except (OSError, ValueError, KeyError):
            pass
        for name, points in self.tables.items():
            tables.setdefault(name, {}).update({str(x): c for x, c in points.items()})
        data = {"key": self.key, "config": dataclasses.asdict(self.cfg), "model_hash": self.sources,
                "tables": {name: dict(sorted(p.items(), key=lambda kv: int(kv[0])))
                           for name, p in sorted(tables.items())}}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.chmod(tmp, 0o644)                # mkstemp's 0600 would hide it from others
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        log.info("saved the timing table of %s to %s", self.cfg.name, self.path)

    # ---- direct model runs ----------------------------------------------------------------

    def _check(self, op: str, dims: Sequence[int]) -> None:
        reason = why_infeasible(self.cfg, op, *dims)
        if reason:
            raise ShapeError(reason)

    def measure_cycles(self, op: str, *dims: int) -> int:
        """Device cycles of one descriptor run on the model now, through the driver as a host
        sends it (completion.cycles), as rtlbench/figures.py's Runner does; the same count for
        the same shape whatever ran before on this instance."""
        self._check(op, dims)
        return _drive(self._measure(op, tuple(int(x) for x in dims)))

    async def _measure(self, op: str, dims: tuple[int, ...]) -> int:
        cfg = self.cfg
        desc = _descriptor(op, dims, 0)
        # slots big enough for the input and the result; rings from 0, the data range after
        # them. Every base is aligned to the slot size (>= 4 KiB), so the cycles do not
        # depend on it: the device cuts bursts at 4 KiB boundaries. Interrupts: the driver
        # then waits for the completion instead of polling it (half the wall time; the
        # model leaves the host's reads out of the device's cycles either way).
        log2_slot = max(12, (max(payload_bytes(desc), result_bytes(desc)) + 64 - 1).bit_length())
        if self._dev is None:
            self._dev = await NdpDevice.open(ModelTransport(cfg))
            self._log2_slot = None
        dev = self._dev
        if self._log2_slot != log2_slot:
            ring = 2 << log2_slot                                   # two slots per ring
            if 2 * ring >= cfg.dram_bytes:
                raise ShapeError(f"{op} {dims}: its slots do not fit the {cfg.dram_bytes}-byte DRAM")
            self._queue = await dev.configure_queue(0, sq_base=0, cq_base=ring, data_base=2 * ring,
                                                    data_limit=cfg.dram_bytes, log2_depth=1,
                                                    log2_slot=log2_slot, irq=True)
            self._log2_slot = log2_slot
        queue = self._queue
        assert queue is not None
        queue.free_all()
        m, k, n = dims[0], dims[1], dims[-1]
        zeros = _zeros
        done: object
        if op == "lora_xab":
            adapter = await dev.upload_lora(zeros(k, n), zeros(n, k))
            done = await dev.lora_xab(zeros(m, k), adapter, return_completion=True,
                                      timeout_cycles=1 << 40)
        elif op == "attention":
            block = await dev.upload_kv(zeros(n, k), zeros(n, k))
            done = await dev.attention_partial(zeros(m, k), block, scaled=True,
                                               return_completion=True, timeout_cycles=1 << 40)
        elif op == "attention_share":
            rows, d, page, t = dims
            share = await dev.upload_kv_paged(zeros(t, d), zeros(t, d), page.bit_length() - 1)
            done = await dev.attention_paged(zeros(rows, d), share, scaled=True,
                                             return_completion=True, timeout_cycles=1 << 40)
        else:
            tensor = await dev.upload(zeros(k, n))
            done = await dev.gemm(zeros(m, k), tensor, return_completion=True,
                                  timeout_cycles=1 << 40)
        _, completion = cast(tuple[Any, Completion], done)
        self.model_runs += 1
        return completion.cycles


    def measure_stream(self, op: str, *dims: int) -> tuple[float, float]:
        """(period, drain) cycles of `op` on `dims` from one direct model run of
        STREAM_COPIES copies back to back (module docstring)."""
        self._check(op, dims)
        times = self.measure_stream_times([(op, *dims)] * STREAM_COPIES)
        period = (times[-1] - times[1]) / (STREAM_COPIES - 2)
        return period, times[-1] - STREAM_COPIES * period

    def measure_stream_times(self, shapes: Sequence[Shape]) -> list[int]:
        """Cycles from the doorbell to each completion of a stream of `shapes` ((op, *dims)
        each) on an idle model device: every descriptor in one queue before the doorbell
        rings (host writes through the memory backdoor, taking no device time), operands
        placed apart (their values do not change cycles), completions taken by interrupt."""
        shapes = [(op, *(int(x) for x in dims)) for op, *dims in shapes]
        for op, *dims in shapes:
            self._check(op, tuple(dims))
        return _drive(self._measure_stream(shapes))

    async def _measure_stream(self, shapes: Sequence[Shape]) -> list[int]:
        cfg = self.cfg
        sized = [_descriptor(op, tuple(dims), 0) for op, *dims in shapes]
        need = HEADER_BYTES + max(max(payload_bytes(d), result_bytes(d), LINE_BYTES) for d in sized)
        log2_slot, log2_depth = (need - 1).bit_length(), max(1, (len(shapes) - 1).bit_length())
        ring = 1 << (log2_depth + log2_slot)
        if 2 * ring >= cfg.dram_bytes:
            raise ShapeError(f"a stream of {len(shapes)} descriptors: its slots do not fit the "
                             f"{cfg.dram_bytes}-byte DRAM")
        transport = ModelTransport(cfg, backdoor_memory=True)
        dev = await NdpDevice.open(transport)
        queue = await dev.configure_queue(0, sq_base=0, cq_base=ring, data_base=2 * ring,
                                          data_limit=cfg.dram_bytes, log2_depth=log2_depth,
                                          log2_slot=log2_slot, irq=True)
        descs = []
        zeros = _zeros
        try:
            for (op, *dims), d in zip(shapes, sized, strict=True):
                if op == "attention_share":         # its pages and list (their addresses are read)
                    rows, head_dim, page, t = dims
                    share = await dev.upload_kv_paged(zeros(t, head_dim), zeros(t, head_dim), page.bit_length() - 1)
                    descs.append(attention_descriptor(share, rows))
                else:                               # 4 KiB aligned, as _measure's
                    descs.append(_descriptor(op, tuple(dims), queue.allocate(d.dev_size * LINE_BYTES, 4096)))
        except OutOfDeviceMemory:
            raise ShapeError(f"a stream of {len(shapes)} descriptors: its operands do not fit "
                             f"the {cfg.dram_bytes}-byte DRAM") from None
        start = transport.now
        seqs = await queue.submit_many([(d, b"") for d in descs])
        times: list[int] = []
        for _ in seqs:
            if not await transport.wait_irq(0, 1 << 40):
                raise RuntimeError("the model device stopped answering a stream")
            times.append(transport.now - start)
        for seq in seqs:
            completion = await queue.wait(seq)
            if completion.status != Status.OK:
                raise RuntimeError(f"seq {seq} of a timing stream answered {completion.status.name}")
        self.model_runs += 1
        return times


# ---- the check: table against direct model runs -----------------------------------------

def _zeros(*shape: int) -> npt.NDArray[np.float16]:
    """An operand of `shape` (its values do not change cycles)."""
    return np.zeros(shape, np.float16)


def random_shape(cfg: DeviceConfig, op: str, rng: np.random.Generator) -> tuple[int, ...] | None:
    """Random dims of `op` from the scheduler's domain that the device runs (None if none)."""
    if op == "attention_share":
        paged = [(rows, d, page) for rows in HEAD_ROWS for d in HEAD_DIMS for page in PAGES
                 if why_infeasible(cfg, op, rows, d, page, 1) is None]
        if not paged:
            return None
        rows, d, page = paged[rng.integers(len(paged))]
        t_max = min(cfg.k_max, cfg.n_max, MAX_TOKENS, PAGE_LIST_MAX * page)
        return rows, d, page, int(rng.integers(1, t_max + 1))
    if op == "attention":
        t_max = min(cfg.k_max, cfg.n_max, MAX_TOKENS)
        choices = [(rows, d) for rows in HEAD_ROWS for d in HEAD_DIMS if d <= min(cfg.k_max, cfg.n_max)]
        if not choices or t_max < 1:
            return None
        rows, d = choices[rng.integers(len(choices))]
        return rows, d, int(rng.integers(1, t_max + 1))
    dims = D_MODEL if op == "lora_xab" else D_IN
    choices = [(d, r) for d in dims for r in RANKS if why_infeasible(cfg, op, 1, d, r) is None]
    if not choices:
        return None
    d, r = choices[rng.integers(len(choices))]
    return int(rng.integers(1, MAX_BATCH + 1)), d, r


def check(cfg: DeviceConfig, samples: int, seed: int, cache_dir: str | pathlib.Path | None = None,
          out: Callable[[str], object] = print) -> list[float]:
    """Compare the tables with direct model runs: the latency of `samples` random shapes per
    op, and the stream formula (the stream table's periods and drains) on `samples` random
    mixed streams of 2..24 descriptors against the model running each stream back to back.
    Returns the relative errors."""
    timing, rng = DeviceTiming(cfg, cache_dir), np.random.default_rng(seed)
    errors: list[float] = []

    def report(name: str, rows: list[tuple[float, Any, float, int]]) -> None:
        if not rows:
            out(f"{name:<10} no shape of the domain fits config {cfg.name!r}")
            return
        worst = max(rows)
        out(f"{name:<10} n={len(rows)} median_error={np.median([r[0] for r in rows]):.3%} "
            f"max_error={worst[0]:.3%} (worst {worst[1]}: table {worst[2]:.1f}, model {worst[3]} cycles)")
        errors.extend(r[0] for r in rows)

    shapes: list[Shape] = []
    for op in ("lora_xa", "lora_xab", "attention", "attention_share"):
        rows: list[tuple[float, Any, float, int]] = []
        for _ in range(samples):
            dims = random_shape(cfg, op, rng)
            if dims is None:
                break
            shapes.append((op, *dims))
            table, model = timing.cycles(op, *dims), timing.measure_cycles(op, *dims)
            rows.append((abs(table - model) / model, dims, table, model))
        report(op, rows)
    rows = []
    for _ in range(samples if shapes else 0):
        stream = [shapes[i] for i in rng.integers(len(shapes), size=int(rng.integers(2, 25)))]
        table, model = timing.stream_seconds(stream) * cfg.clock_hz, timing.measure_stream_times(stream)[-1]
        rows.append((abs(table - model) / model, f"{len(stream)} descriptors", table, model))
    report("stream", rows)
    out(f"device_timing config={cfg.name} n={len(errors)} median_error={np.median(errors or [0]):.3%} "
        f"max_error={max(errors or [0]):.3%}")
    return errors


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="paper")
    parser.add_argument("--samples", type=int, default=40, help="random shapes per op")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cache-dir", default=None, help=f"default ${CACHE_ENV}, else {DEFAULT_CACHE}")
    args = parser.parse_args(argv)
    check(isa.load_config(args.config), args.samples, args.seed, args.cache_dir)


if __name__ == "__main__":
    main()

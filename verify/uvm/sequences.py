"""Sequences: constrained-random descriptors across every op, dtype, flag, shape class,
queue and PASID, bad ones included, and the protocol actions. Each draws from its own
seeded generator, so a run is reproducible from the test's seed."""
import dataclasses
import random

import numpy as np
from pyuvm import uvm_sequence

import isa
from rtlbench import stream
from verify import fuzz

from .items import PROTOCOL_ITEMS, DescriptorItem, ForeignMemItem, StallsItem


class _Seq(uvm_sequence):
    def __init__(self, name, cfg, count=0, seed=1):
        super().__init__(name)
        self.cfg, self.count, self.rng = cfg, count, random.Random(seed)
        self.seed = seed

    async def send(self, item):
        await self.start_item(item)
        await self.finish_item(item)


def fit_slot(recipe, room=(1 << fuzz.LOG2_SLOT) - isa.slots.HEADER_BYTES):
    """The recipe with its input's rows cut so that its payload fits `room` bytes, the payload
    room of the env's slots (verify/fuzz.py's window, 16 KiB), which are smaller than those
    rtlbench/stream.py draws its shapes for (256 KiB): a STORE's rows (k), another kind's
    input rows (m). A recipe that fits is returned as it is."""
    if recipe.kind == "store":
        row = 2 * recipe.n
        return dataclasses.replace(recipe, k=room // row) if recipe.k * row > room else recipe
    if recipe.kind == "load":
        return recipe
    row = 2 * (recipe.n if recipe.kind == "softmax" else recipe.k)
    return dataclasses.replace(recipe, m=max(1, room // row)) if recipe.m * row > room else recipe


class ComputeSeq(_Seq):
    """rtlbench/stream.py's mix (GEMV, GEMM, transposed, LOAD, STORE, SOFTMAX and its
    partial form, ATTENTION, LORA_XAB, and 15 kinds of bad descriptor), one at a time over
    every queue, each input cut to the env's slot (fit_slot): results checked against the
    model."""

    async def body(self):
        batches = stream.generate(self.seed, self.count, self.cfg)
        for i, recipe in enumerate(fit_slot(item) for batch in batches for item in batch):
            await self.send(DescriptorItem(f"compute{i}", queue=recipe.queue, recipe=recipe))


class CornerShapeSeq(_Seq):
    """K and N at 1, LANES - 1, LANES, LANES + 1 and at the buffers' limits (K = k_max,
    N = n_max, and one past each), plain and transposed, one and several input rows, for
    GEMV and GEMM; K at every class for ATTENTION (d), LORA_XAB (D) and SOFTMAX (its
    row length); then every flag combination and dtype on every op (verify/fuzz.py's
    well-formed words with their flags or dtype replaced)."""

    async def body(self):
        cfg, lanes, rng = self.cfg, self.cfg.lanes, self.rng
        dims = [1, 2, lanes - 1, lanes, lanes + 1, 3 * lanes]
        shapes = [(k, n) for k in dims for n in dims]
        shapes += [(cfg.k_max, 3), (cfg.k_max + 1, 3), (5, cfg.n_max), (5, cfg.n_max + 1)]
        nq = fuzz.n_queues(cfg)
        recipes = []
        for k, n in shapes:
            for kind, m in (("gemv", 1), ("gemm", rng.randint(2, 2 * cfg.rows + 1))):
                if m * k * 2 > 16000:        # the input must fit the slot
                    m = 1
                recipes.append(stream.Item(len(recipes) % nq, kind, m=m, k=k, n=n, seed=rng.randrange(1 << 30),
                                           trans=rng.random() < 0.5))
        for k in dims + [cfg.k_max, cfg.k_max + 1]:
            seed = rng.randrange(1 << 30)
            recipes += [stream.Item(len(recipes) % nq, "attention", m=1, k=k, n=3, seed=seed, trans=True),
                        stream.Item(len(recipes) % nq, "xab", m=1, k=k, n=2, seed=seed),
                        stream.Item(len(recipes) % nq, "softmax", m=1, n=k, seed=seed)]
        for i, recipe in enumerate(recipes):
            await self.send(DescriptorItem(f"corner{i}", queue=recipe.queue, recipe=recipe))
        view = fuzz.queue_view(cfg, 0)
        np_rng = np.random.default_rng(self.seed)
        for i in range(160):
            # the op chosen in turn, not drawn, so that every op meets every dtype and flag
            # word whatever the seed (the 'op x status' goal's BAD_DTYPE bins)
            desc, shape_class = fuzz.well_formed(np_rng, cfg, view, fuzz.OP_KINDS[(i // 8) % len(fuzz.OP_KINDS)])
            if i % 2:
                desc = dataclasses.replace(desc, flags=[0, 1, 2, 3, 1 << 5][(i // 2) % 5])
            else:
                desc = dataclasses.replace(desc, dtype=[0, 1, 2, 9][(i // 2) % 4])
            case = fuzz.Case(desc, "flags", shape_class, isa.check_descriptor(desc, view, cfg),
                             np_rng.bytes(desc.in_size * 64) if desc.in_size * 64 <= view.slot_bytes - 64 else b"")
            await self.send(DescriptorItem(f"flags{i}", queue=0, recipe=case))


class FuzzSeq(_Seq):
    """verify/fuzz.py's words: uniform, well formed over every shape class, and mutated."""

    async def body(self):
        nq = fuzz.n_queues(self.cfg)
        for i, case in enumerate(fuzz.cases(self.cfg, self.seed, self.count)):
            await self.send(DescriptorItem(f"fuzz{i}", queue=i % nq, recipe=case))


class FaultSeq(_Seq):
    """A descriptor of each kind per fault: its operand answered SLVERR or DECERR (read, or
    a STORE's write), its input's read, its result's write. Where a descriptor does not
    reach the faulty line (a SOFTMAX has no operand), it must complete OK."""
    FAULTS = [("operand", 2, 2), ("operand", 3, 3), ("input", 2, 0), ("input", 3, 0),
              ("result", 0, 2), ("result", 0, 3)]

    async def body(self):
        kinds = ["gemv", "gemm", "attention", "xab", "load", "softmax", "store"]
        i = 0
        for which, read, write in self.FAULTS:
            for kind in kinds:
                recipe = self._recipe(kind, i)
                await self.send(DescriptorItem(f"fault{i}", queue=recipe.queue, recipe=recipe,
                                               fault=(which, read, write)))
                i += 1

    def _recipe(self, kind, i):
        q, rng = i % self.cfg.num_queues, self.rng
        seed = rng.randrange(1 << 30)
        if kind == "attention":
            return stream.Item(q, kind, m=2, k=32, n=rng.randint(8, 64), seed=seed, trans=True)
        if kind == "xab":
            return stream.Item(q, kind, m=2, k=rng.randint(16, 64), n=8, seed=seed)
        if kind == "softmax":
            return stream.Item(q, kind, m=2, n=rng.randint(8, 80), seed=seed)
        if kind in ("load", "store"):
            return stream.Item(q, kind, k=rng.randint(2, 20), n=rng.randint(8, 40), seed=seed)
        return stream.Item(q, kind, m=1 if kind == "gemv" else 3, k=rng.randint(8, 96), n=rng.randint(8, 64),
                           seed=seed)


class ProtocolSeq(_Seq):
    """Each protocol action on each queue: a doorbell before the valid word, repeated and
    stale doorbells, a full ring (which also wraps the sequence numbers past the depth),
    refused doorbells and configuration writes from foreign PASIDs, and (on the
    cocotbext-axi bench) refused CXL.mem accesses to another queue's slots."""

    def __init__(self, name, cfg, count=0, seed=1, host_port=True):
        super().__init__(name, cfg, count, seed)
        self.host_port = host_port

    async def body(self):
        actions = [kind for kind in PROTOCOL_ITEMS if self.host_port or kind is not ForeignMemItem]
        for q in range(fuzz.n_queues(self.cfg)):
            for action in actions:
                recipe = stream.Item(q, "gemv", m=1, k=self.rng.randint(8, 64), n=self.rng.randint(4, 40),
                                     seed=self.rng.randrange(1 << 30))
                await self.send(action(f"{action.kind}{q}", queue=q, recipe=recipe))


class BackpressureSeq(_Seq):
    """Random stalls on every channel while a compute mix runs."""

    async def body(self):
        await self.send(StallsItem("stalls_on", on=True))
        inner = ComputeSeq("stalled", self.cfg, self.count, self.seed + 7)
        await inner.start(self.sequencer)
        await self.send(StallsItem("stalls_off", on=False))


class TopSeq(_Seq):
    """Everything, in an order that keeps each part's queues in a known state."""

    def __init__(self, name, cfg, counts, seed=1, host_port=True, corners=True):
        super().__init__(name, cfg, 0, seed)
        self.counts, self.host_port, self.corners = counts, host_port, corners

    async def body(self):
        c, s = self.counts, self.seed
        parts = [ProtocolSeq("protocol", self.cfg, 0, s + 1, self.host_port)]
        if self.corners:
            parts.append(CornerShapeSeq("corners", self.cfg, 0, s + 2))
        parts += [FaultSeq("faults", self.cfg, 0, s + 3),
                 ComputeSeq("compute", self.cfg, c["compute"], s + 4),
                 BackpressureSeq("backpressure", self.cfg, c["backpressure"], s + 5),
                 FuzzSeq("fuzz", self.cfg, c["fuzz"], s + 6)]
        for seq in parts:
            await seq.start(self.sequencer)

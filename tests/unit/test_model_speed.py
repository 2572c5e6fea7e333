"""The cycle model's fast paths against what they stand for: the timing-only model
(sim/device.py NdpModel(compute_results=False)) against the full one, the compiled
fixed point of a reader run for the unpacker against the Python one, the cached burst
cuts against the computed ones, and the explicit State copy against a deep copy."""
import copy
import random

import numpy as np
import pytest

import isa
from isa import Descriptor, Op, Status
from isa.descriptor import DescType, Dtype
from isa.slots import HEADER_BYTES
from isa.validate import lines, result_bytes
from driver import DevicePool, NdpDevice
from isa.encoders import matmul_descriptor
from driver.clock import SimClock, run
from isa.encoders import attention_descriptor, load_descriptor, lora_xab_descriptor, softmax_descriptor
from driver.model_transport import ModelTransport
from sim import dram_reader, unpacker
from sim.device import NdpModel

CONFIGS = ["default", "small", "quad", "paper"]


# ---- timing-only -------------------------------------------------------------------------

def fp16(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float16)


async def mixed_stream(cfg, compute_results):
    """A mixed stream on two queues sharing a clock with a second device: GEMV, GEMM,
    LORA_XAB, ATTENTION (keys token-major and not), SOFTMAX (normalized and partial), a
    LOAD and a bad descriptor, all in flight together. Returns per completion (queue,
    seq, status, cycles, the cycle the host saw it, the bytes the device left in its
    slot's payload), the device's final cycle and its model."""
    rng = np.random.default_rng(3)
    clock = SimClock()
    transport = ModelTransport(cfg, clock=clock, compute_results=compute_results)
    dev = await NdpDevice.open(transport)
    queues = [await dev.configure_queue(q, (2 * q) << 16, (2 * q + 1) << 16, 1 << 20, cfg.dram_bytes, 4, 12)
              for q in range(2)]
    w = await dev.upload(fp16(rng, 64, 40), queue=0)
    small = await dev.upload(fp16(rng, 16, 32), queue=0)
    kv = await dev.upload_kv(fp16(rng, 48, 32), fp16(rng, 48, 32), queue=0)
    kv_t = await dev.upload_kv(fp16(rng, 20, 32), fp16(rng, 20, 32), queue=0, token_major=False)
    adapter = await dev.upload_lora(fp16(rng, 64, 8), fp16(rng, 8, 64), queue=0)
    bad = Descriptor(type=DescType.READ_COMPUTE, op=11, dtype=Dtype.FP16, dev_addr=w.addr, dev_size=w.size_lines,
                     dev_rows=64, dev_cols=40, in_size=lines(64 * 2), in_rows=1, in_cols=64)
    items = [(matmul_descriptor(Op.GEMV, w, 1), 64), (matmul_descriptor(Op.GEMM, w, 3), 64),
             (lora_xab_descriptor(adapter, 2), 64), (attention_descriptor(kv, 1), 32),
             (attention_descriptor(kv_t, 3), 32), (softmax_descriptor(2, 70), 70),
             (softmax_descriptor(1, 33, partial=True), 33), (load_descriptor(small), 0), (bad, 64)]
    batches = [[], []]
    for i in range(3 * len(items)):
        desc, k = items[i % len(items)]
        batches[i % 2].append((desc, fp16(rng, desc.in_rows, k).tobytes() if k else b""))
    seqs = [await queue.submit_many(batch, ring=False) for queue, batch in zip(queues, batches)]
    for queue in queues:
        await queue.ring()
    out = []
    for queue, queue_seqs in zip(queues, seqs):
        for seq in queue_seqs:
            desc = queue._outstanding(seq)
            c = await queue.wait(seq)
            payload = transport.model.memory.read(queue.cq_slot(seq) + HEADER_BYTES, result_bytes(desc))
            out.append((queue.index, seq, c.status, c.cycles, transport.now, desc, payload))
    return out, transport.model.now, transport.model


@pytest.mark.parametrize("config", ["default", "quad"])
def test_timing_only_has_the_same_cycles_and_writes_no_result(config):
    cfg = isa.load_config(config)
    full, full_end, _ = run(mixed_stream(cfg, True))
    timing, timing_end, _ = run(mixed_stream(cfg, False))
    assert full_end == timing_end
    assert [row[:5] for row in full] == [row[:5] for row in timing]
    assert [row[2] for row in full].count(Status.BAD_OP) == 3
    assert all(row[2] == Status.OK for row in full if row[5].op != 11)
    for (*_, desc, payload), (*_, _, timing_payload) in zip(full, timing):
        if desc.type == DescType.READ_COMPUTE:
            assert not any(timing_payload), desc        # no result byte written
        else:
            assert timing_payload == payload            # a LOAD still copies
    assert any(any(row[6]) for row in full if row[5].type == DescType.READ_COMPUTE)


def test_pool_of_timing_only_models():
    async def body():
        pool = await DevicePool.model(isa.load_config("small"), 2, compute_results=False, log2_depth=2,
                                      log2_slot=12)
        return [dev.transport.model.compute_results for dev in pool.devices]
    assert run(body()) == [False, False]


def test_a_given_model_takes_no_compute_results():
    cfg = isa.load_config("small")
    with pytest.raises(ValueError):
        ModelTransport(cfg, model=NdpModel(cfg), compute_results=False)


# ---- the reader's compiled fixed point ----------------------------------------------------

def random_steals(rng, around, cfg):
    steals = []
    for _ in range(rng.randrange(6)):
        request = around + rng.randrange(-20, 400)
        handshake = request + 1 + rng.randrange(3)
        steals.append((request, handshake, handshake + cfg.dram_read_latency + rng.randrange(4),
                       rng.randrange(2), rng.randrange(cfg.dram_channels)))
    return steals


@pytest.mark.parametrize("config", CONFIGS)
def test_compiled_unpacker_run_is_the_python_fixed_point(config):
    """dram_reader.run with an unpacker.Consumer (compiled: _unpacked_run, which compiles
    unpacker.consume in, numba's cache unaware of edits to sim/unpacker.py) against the same
    consumer as a plain function (the Python fixed point), run after run on one reader."""
    cfg = isa.load_config(config)
    rng = random.Random(config)
    compiled, plain = dram_reader.Reader(cfg), dram_reader.Reader(cfg)
    start = 0
    for _ in range(60):
        rows = rng.choice([1, 1, 2, 3, cfg.rows])
        cols = rng.randrange(1, 3 * cfg.lanes)
        pair = rows > 1 and rng.random() < 0.5
        first = 2 * rng.randrange(1 << 18)
        addr = first - first % 64
        n_lines = -(-(first % 64 + 2 * rows * cols) // 64)
        offset = (first % cfg.beat_bytes) // 2
        start = max(start + rng.randrange(40), compiled.issued_all or 0)
        floor = start + 1 + rng.randrange(60)
        slots = unpacker.slots(offset, rows, cols, cfg.lanes, pair)
        steals = random_steals(rng, start, cfg)
        fast = unpacker.Consumer(*slots, cfg.lanes, floor)
        slow = unpacker.Consumer(*slots, cfg.lanes, floor)
        got = dram_reader.run(start, addr, n_lines, cfg, fast, steals, compiled, floor)
        want = dram_reader.run(start, addr, n_lines, cfg, lambda shown: slow(shown), steals, plain, floor)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(fast.times, slow.times)
        assert same(compiled, plain)


def test_consume_is_slot_and_pull_times():
    rng = np.random.default_rng(1)
    for _ in range(200):
        lanes = int(rng.choice([32, 128, 512]))
        rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 4 * lanes))
        ends, last = unpacker.slots(int(rng.integers(lanes)), rows, cols, lanes, bool(rng.integers(2)))
        shown = np.sort(rng.integers(0, 400, int(last[-1]) + 1 + int(rng.integers(3))))
        floor = int(rng.integers(0, 300))
        reference = unpacker.Consumer(ends, last, lanes, floor)
        pulls = reference(shown)
        times, compiled_pulls = unpacker.consume(shown, floor, ends, last, lanes)
        np.testing.assert_array_equal(times, reference.times)
        np.testing.assert_array_equal(compiled_pulls, pulls)


@pytest.mark.parametrize("config", CONFIGS)
def test_cached_bursts_are_the_cut(config):
    cfg = isa.load_config(config)
    rng = random.Random(config)
    for _ in range(300):
        addr, n_lines = 64 * rng.randrange(1 << 20), rng.choice([1, 2, 3, 17, 64, 65, 200, 1000])
        for got, want in zip(dram_reader.bursts(addr, n_lines, cfg), dram_reader._cut(addr, n_lines, cfg)):
            np.testing.assert_array_equal(got, want)


# ---- State.copy ---------------------------------------------------------------------------

def same(a, b):
    """Equal values, recursively (objects by their attributes, arrays by their elements)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return type(a) is type(b) and same(vars(a), vars(b))
    return a == b


@pytest.mark.parametrize("config", ["default", "quad"])
def test_state_copy_is_independent_as_a_deep_copy(config):
    """After a stream, the model's State: a schedule from its copy leaves it as a deep copy
    of it was (the copy shares only what no schedule changes in place)."""
    cfg = isa.load_config(config)
    *_, model = run(mixed_stream(cfg, True))      # a state with reads, writes and reports in it
    state = model.state
    for _ in range(3):
        copied = state.copy()
        before = copy.deepcopy(state)
        assert same(copied, before)
        copied.writer.line(copied.writer.quiet_at(), 1 << 20)
        copied.writer.stream(copied.writer.idle_at, 1 << 21, 3)
        for beat in range(int(dram_reader.bursts(1 << 21, 3, cfg)[2].sum())):
            copied.writer.take(copied.writer.idle_at + beat)
        dram_reader.run(copied.reader.issued_all or 0, 1 << 22, 40, cfg, lambda shown: shown,
                        [(5, 6, 9, 0, 0)], copied.reader)
        assert same(state, before)
        state = copied


def test_speed_tool(capsys):
    from rtlbench import speed
    for extra in ([], ["--timing-only"]):
        assert speed.main(["--config", "small", "--devices", "2", "--per-device", "5", "--tokens", "32"] + extra) > 0
        assert "speed descriptors=10 " in capsys.readouterr().out

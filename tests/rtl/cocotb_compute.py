"""GEMV and GEMM on random shapes and values, bit for bit against sim/golden.py."""
import cocotb
import numpy as np

from sim import golden
from env import DeviceEnv

SEED = 20261129


def random_fp16(rng, shape, special=False):
    """Normal values of mixed scale; with `special`, also subnormals, zeros, infinities, NaN."""
    values = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 4, shape))).astype(np.float16)
    if special:
        pick = rng.random(shape)
        values[pick < 0.05] = np.float16(0.0)
        values[(pick >= 0.05) & (pick < 0.08)] = np.float16(-0.0)
        sub = (pick >= 0.08) & (pick < 0.12)
        values[sub] = (rng.integers(1, 1024, int(sub.sum())).astype(np.uint16)).view(np.float16)
        values[(pick >= 0.12) & (pick < 0.125)] = np.float16(np.inf)
        values[(pick >= 0.125) & (pick < 0.13)] = np.float16(np.nan)
    return values


def assert_bits_equal(got, expected, what):
    got_bits, exp_bits = got.view(np.uint16), expected.view(np.uint16)
    bad = np.argwhere(got_bits != exp_bits)
    assert bad.size == 0, (f"{what}: {len(bad)} of {got.size} results differ; first at {tuple(bad[0])}: "
                           f"got {got_bits[tuple(bad[0])]:#06x}, expected {exp_bits[tuple(bad[0])]:#06x}")


async def check_gemm(dev, rng, m, k, n, special=False, gemv=False):
    w = random_fp16(rng, (k, n), special)
    x = random_fp16(rng, (m, k), special)
    tensor = await dev.upload(w)
    if gemv:
        got = await dev.gemv(x[0], tensor)
        assert_bits_equal(got, golden.gemv(x[0], w), f"gemv {k}x{n}")
    else:
        got = await dev.gemm(x, tensor)
        assert_bits_equal(got, golden.gemm(x, w), f"gemm {m}x{k}x{n}")
    dev.queue().free_all()


@cocotb.test()
async def gemv_random_shapes(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    await env.setup_queue(0)
    rng = np.random.default_rng(SEED)
    shapes = [(1, 1), (1, 32), (32, 1), (7, 5), (33, 17), (64, 64), (100, 33), (31, 97), (65, 200)]
    shapes += [tuple(int(v) for v in rng.integers(1, 160, 2)) for _ in range(6)]
    for k, n in shapes:
        await check_gemm(dev, rng, 1, k, n, gemv=True)


@cocotb.test()
async def gemm_random_shapes(dut):
    env = DeviceEnv(dut)
    dev = await env.start()
    await env.setup_queue(0)
    rng = np.random.default_rng(SEED + 1)
    cfg = env.cfg
    shapes = [(2, 3, 5), (cfg.rows, 32, 32), (cfg.rows + 1, 17, 40), (3 * cfg.rows, 40, 9), (9, 31, 100),
              (13, 1, 70), (5, 70, 1)]
    shapes += [tuple(int(v) for v in rng.integers(1, 80, 3)) for _ in range(5)]
    for m, k, n in shapes:
        await check_gemm(dev, rng, m, k, n)


@cocotb.test()
async def gemm_under_backpressure(dut):
    """Random stalls on every DRAM channel and on the host's read data and write responses."""
    env = DeviceEnv(dut)
    dev = await env.start()
    env.add_backpressure()
    await env.setup_queue(0)
    rng = np.random.default_rng(SEED + 4)
    for m, k, n in [(1, 300, 70), (6, 65, 33), (2, 8, 200)]:
        await check_gemm(dev, rng, m, k, n)


@cocotb.test()
async def special_values(dut):
    """Zeros of both signs, subnormals, infinities and NaN in both operands."""
    env = DeviceEnv(dut)
    dev = await env.start()
    await env.setup_queue(0)
    rng = np.random.default_rng(SEED + 2)
    for m, k, n in [(1, 64, 48), (5, 33, 70), (3, 200, 20)]:
        await check_gemm(dev, rng, m, k, n, special=True)
    # overflow to infinity, and cancellation to exact zero
    w = np.full((4, 8), 60000, np.float16)
    x = np.array([[2, 2, -2, -2]], np.float16)
    tensor = await dev.upload(w)
    assert_bits_equal(await dev.gemm(x, tensor), golden.gemm(x, w), "cancellation")
    x = np.array([[1, 1, 1, 1]], np.float16)
    assert_bits_equal(await dev.gemm(x, tensor), golden.gemm(x, w), "overflow")


@cocotb.test(expect_fail=True)
async def scoreboard_catches_a_corrupted_weight(dut):
    """Flip one bit of a weight in DRAM behind the driver's back: the comparison must fail."""
    env = DeviceEnv(dut)
    dev = await env.start()
    await env.setup_queue(0)
    rng = np.random.default_rng(SEED + 3)
    w = random_fp16(rng, (16, 8))
    x = random_fp16(rng, (1, 16))
    tensor = await dev.upload(w)
    hi_byte = tensor.addr + 2 * 37 + 1           # exponent bits of weight (2, 5)
    env.dram.write(hi_byte, bytes([env.dram.read(hi_byte, 1)[0] ^ 0x40]))
    assert_bits_equal(await dev.gemm(x, tensor), golden.gemm(x, w), "corrupted weight")

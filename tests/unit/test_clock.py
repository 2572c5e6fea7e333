"""driver.clock: simulated time for asyncio, and ModelTransports that share it.

A broken virtual-time loop hangs rather than fails (it sleeps for real, spins on a timer
it never runs, or waits forever), so every test body runs under a wall-clock alarm."""
import asyncio
import contextlib
import signal
import time

import numpy as np
import pytest

import isa
from isa import Op
from driver import NdpDevice, SimClock, SimulationDeadlock, VirtualTimeLoop
from isa.encoders import matmul_descriptor
from isa.errors import NdpError
from driver.clock import run
from driver.model_transport import MEM_READ_CYCLES, MEM_WRITE_CYCLES, ModelTransport

WALL_LIMIT_S = 10


@contextlib.contextmanager
def wall_limit(seconds=WALL_LIMIT_S):
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s of wall time")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def simulate(coro):
    with wall_limit():
        return run(coro)


# ---- the loop --------------------------------------------------------------------------------

def test_an_hour_of_sleep_takes_no_wall_time():
    async def body():
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop) and loop.time() == 0.0
        await asyncio.sleep(3600)
        return loop.time()
    start = time.perf_counter()
    assert simulate(body()) == 3600.0
    assert time.perf_counter() - start < 1.0


def test_timers_run_in_order_at_their_own_time():
    async def body():
        loop = asyncio.get_running_loop()
        seen = []

        async def sleeper(name, seconds):
            await asyncio.sleep(seconds)
            seen.append((name, loop.time()))
        await asyncio.gather(sleeper("a", 5.0), sleeper("b", 3.0), sleeper("c", 4.5))
        return seen, loop.time()
    seen, end = simulate(body())
    assert seen == [("b", 3.0), ("c", 4.5), ("a", 5.0)]
    assert end == 5.0           # together: the longest, not the sum


def test_nanosecond_steps_far_from_zero():
    # at 1e6 s a float step is about 1.2e-10 s: a fixed 1e-13 clock resolution would
    # leave a timer due now unrun forever
    async def body():
        clock = SimClock()
        await clock.sleep_until(1e6)
        for _ in range(3):
            await clock.sleep(1e-9)
        return clock.now, clock.cycle(1e9)
    now, cycle = simulate(body())
    assert now == pytest.approx(1e6 + 3e-9, abs=1e-9)
    assert cycle == 10**15 + 3


def test_sleep_until_the_past_does_not_go_back():
    async def body():
        clock = SimClock()
        await clock.sleep(2.0)
        await clock.sleep_until(1.0)
        return clock.now
    assert simulate(body()) == 2.0


def test_a_wait_nobody_can_end_raises_deadlock():
    async def body():
        await asyncio.sleep(7)
        await asyncio.Event().wait()
    with pytest.raises(SimulationDeadlock, match="no coroutine can make progress") as info:
        simulate(body())
    assert isinstance(info.value, NdpError) and "7.0" in str(info.value)


def test_two_coroutines_waiting_on_each_other_deadlock():
    async def body():
        a, b = asyncio.Event(), asyncio.Event()

        async def one(mine, other):
            await asyncio.sleep(1)
            await other.wait()
            mine.set()
        await asyncio.gather(one(a, b), one(b, a))
    with pytest.raises(SimulationDeadlock):
        simulate(body())


def test_each_run_starts_a_fresh_loop_at_zero():
    async def body(seconds):
        await asyncio.sleep(seconds)
        return asyncio.get_running_loop().time()
    assert simulate(body(5)) == 5.0
    assert simulate(body(1)) == 1.0


def test_threads_are_refused():
    async def body():
        await asyncio.to_thread(time.sleep, 0)
    with pytest.raises(NdpError, match="real time"):
        simulate(body())


def test_sim_clock_refuses_any_other_loop():
    with pytest.raises(NdpError, match="driver.clock.run"):
        asyncio.run(SimClock().sleep(1))
    with pytest.raises(NdpError, match="driver.clock.run"):
        SimClock().now


# ---- model transports on the clock ---------------------------------------------------------

CFG = isa.load_config("small")


def test_transport_time_is_the_clocks():
    async def body():
        clock = SimClock()
        transport = ModelTransport(CFG, clock=clock)
        await transport.wait_cycles(100)
        assert (transport.now, clock.now) == (100, pytest.approx(100 / CFG.clock_hz))
        await transport.mem_write(0x1000, bytes(64), 0)        # one line
        await clock.sleep(50 / CFG.clock_hz)                    # the GPU side lets time pass
        await transport.mem_read(0x1000, 128, 0)                # two lines
        return transport.now, transport.model.now
    now, model_now = simulate(body())
    assert now == 100 + MEM_WRITE_CYCLES + 1 + 50 + MEM_READ_CYCLES + 2
    assert model_now == now


def test_accesses_to_two_devices_overlap_to_one_they_queue():
    async def body(same):
        clock = SimClock()
        first = ModelTransport(CFG, clock=clock)
        second = first if same else ModelTransport(CFG, clock=clock)
        await asyncio.gather(first.mem_write(0x1000, bytes(64 * 8), 0),
                             second.mem_write(0x2000, bytes(64 * 8), 0))
        return clock.cycle(CFG.clock_hz)
    one = MEM_WRITE_CYCLES + 8
    assert simulate(body(same=False)) == one
    assert simulate(body(same=True)) == 2 * one


def test_waiting_devices_overlap():
    async def body():
        clock = SimClock()
        transports = [ModelTransport(CFG, clock=clock) for _ in range(3)]
        await asyncio.gather(*(t.wait_cycles(1000 * (i + 1)) for i, t in enumerate(transports)))
        return [t.now for t in transports]
    assert simulate(body()) == [3000] * 3


def test_wait_irq_wakes_at_a_completion_another_coroutine_caused():
    """A wait_irq that began while the device was idle (no next event) sleeps towards its
    deadline; a doorbell rung meanwhile must wake it at the completion, not at the deadline."""

    async def body():
        clock = SimClock()
        transport = ModelTransport(CFG, clock=clock)
        dev = await NdpDevice.open(transport)
        queue = await dev.configure_queue(0, 0, 1 << 12, 1 << 13, 1 << 20, 1, 10, irq=True)
        queue.irq = False       # the device pulses, the submitter polls: the pulse is the waiter's
        tensor = await dev.upload(np.ones((32, 32), np.float16))
        deadline = 200_000
        woke = []

        async def waiter():
            woke.append((await transport.wait_irq(0, deadline), transport.now))

        async def submitter():
            await clock.sleep(500 / CFG.clock_hz)
            completion = await queue.run(matmul_descriptor(Op.GEMV, tensor, 1), bytes(64))
            return transport.now, completion
        start = transport.now
        _, (done_at, completion) = await asyncio.gather(waiter(), submitter())
        return start, woke, done_at, completion
    start, [(pulse, woke_at)], done_at, completion = simulate(body())
    assert pulse and completion.ok
    assert woke_at <= done_at < start + 10_000

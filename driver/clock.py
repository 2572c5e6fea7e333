"""One simulated clock for the GPU side and every device of a pool.

Each ModelTransport keeps its own cycle count unless it is given a SimClock; then every
passage of its time is a sleep on the clock, and several devices run in parallel in
simulated time, also under `asyncio.gather`:

    async def main():
        pool = await DevicePool.model(cfg, 4)       # four ModelTransports on one SimClock
        ...
    driver.clock.run(main())

`VirtualTimeLoop` is an asyncio event loop whose time() is simulated seconds: when no
callback is ready it jumps straight to the earliest timer instead of sleeping, so an hour
of simulated time costs no wall time. Real I/O and threads are not simulated.
"""
import asyncio
import math
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

from isa.errors import NdpError

from .errors import SimulationDeadlock

MIN_RESOLUTION = 1e-13      # seconds; far below one device cycle (1 ns at 1 GHz)
_T = TypeVar("_T")


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on simulated time (seconds from 0.0)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._now = 0.0
        super().__init__(*args, **kwargs)
        # the selector's own wait, replaced by the jump in simulated time (private to asyncio)
        self._real_select = self._selector.select       # type: ignore[attr-defined]
        self._selector.select = self._select            # type: ignore[attr-defined]

    def time(self) -> float:
        return self._now

    # asyncio runs the timers due before time() + _clock_resolution. Time only ever moves
    # to a timer's `when` exactly, so one float step above now runs the timer due now; a
    # fixed 1e-13 would vanish next to now beyond about 1000 s, and that timer never ran.
    @property
    def _clock_resolution(self) -> float:
        return max(MIN_RESOLUTION, math.ulp(self._now))

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass        # BaseEventLoop.__init__ sets the wall clock's; it does not apply here

    def _select(self, timeout: float | None = None) -> list[Any]:
        """The loop's wait for I/O: a positive timeout means nothing is ready before the
        earliest timer, so time jumps to it; None means no timer either."""
        events = self._real_select(0)
        if events:
            return events
        if timeout is None:
            raise SimulationDeadlock(
                f"no coroutine can make progress: nothing is ready and no timer is scheduled "
                f"at simulated time {self._now!r} s (a wait on something nobody will set?)")
        if timeout > 0:
            self._now = max(self._now, self._scheduled[0].when())     # type: ignore[attr-defined]
        return events

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> NoReturn:  # type: ignore[override]
        raise NdpError(f"{type(self).__name__} does not run {func!r} in a thread: a thread "
                       f"runs in real time, which simulated time cannot wait for")


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` on a fresh VirtualTimeLoop; returns its result."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coro)


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


class SimClock:
    """Simulated time, read from the running VirtualTimeLoop (see driver.clock.run)."""

    def _loop(self) -> VirtualTimeLoop:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if not isinstance(loop, VirtualTimeLoop):
            raise NdpError(f"SimClock needs a running VirtualTimeLoop, found {loop!r}: run the "
                           f"simulation with driver.clock.run(coro)")
        return loop

    @property
    def now(self) -> float:
        """Simulated seconds since the loop started."""
        return self._loop().time()

    def cycle(self, hz: float) -> int:
        """The current cycle of a clock of `hz`."""
        return round(self.now * hz)

    async def sleep_until(self, t: float, interrupt: "asyncio.Future[Any] | None" = None) -> None:
        """Return at simulated time `t` (at the next loop iteration if `t` is past), or
        earlier, once the asyncio future `interrupt` is done."""
        loop = self._loop()
        due = loop.create_future()
        handle = loop.call_at(max(t, loop.time()), _settle, due)
        wake = lambda _: _settle(due)   # noqa: E731
        if interrupt is not None:
            interrupt.add_done_callback(wake)
        try:
            await due
        finally:
            handle.cancel()
            if interrupt is not None:
                interrupt.remove_done_callback(wake)

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self.now + max(0.0, seconds))

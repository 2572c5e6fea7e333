"""Model of hw/fold_unit.py: when it takes each request and when each word's sums come out.

A request is taken at the earliest one cycle after the previous one, while fewer than
FIFO_DEPTH words are taken and not yet read out (word i waits for word i - FIFO_DEPTH to
be read, the cycle after). With adds (steps >= 1), a word taken at t is held in t + 1 and
enters the adder at t + 1, t + 1 + STEP_CYCLES, .. t + 1 + (steps - 1) * STEP_CYCLES; a
request is not taken in a cycle in which an earlier word enters the adder, nor in the
cycle before one (the one read port: a word's first set and an add's operand never read
together). Word i is at the FIFO's head `out_delay(steps)` cycles after it was taken.
"""
from isa.microarch import ADD_CYCLES as STEP_CYCLES     # a word's add -> its next add (hw/fold_unit.py)
from isa.microarch import FOLD_FIFO_DEPTH as FIFO_DEPTH


def out_delay(steps):
    """Cycles from a word's request taken to its sums at the FIFO's head."""
    return STEP_CYCLES * steps + 2 if steps else 1


def next_take(start, taken, popped, steps):
    """The cycle the request after `taken` (cycles of those taken so far) is taken, with
    requests from `start` on; `popped` holds when the words were read out (at least up to
    the one FIFO_DEPTH back)."""
    i = len(taken)
    cycle = start if i == 0 else taken[-1] + 1
    if i >= FIFO_DEPTH:
        cycle = max(cycle, popped[i - FIFO_DEPTH] + 1)
    if steps:
        # the adder's entries of the words that can still be in it
        entries = {t + 1 + STEP_CYCLES * j for t in taken[-(STEP_CYCLES * steps + 1):] for j in range(steps)}
        while cycle in entries or cycle + 1 in entries:
            cycle += 1
    return cycle

"""Model of hw/readout.py: the cycle each word of a readout job is taken.

A job's words go out in order, rows of N a word of LANES values at a time. From the fold
unit (`steps` adds each, sim/fold_unit.py), a word is ready when its sum comes out; from
the input buffer (`steps` None: SOFTMAX's rows), the first word the second cycle after
`start` (its address the cycle before, its data the next: a synchronous read), each next
one the second cycle after the previous one was taken. A word is taken once it is ready
and its consumer takes it (`take_word`: the line packer, or at once for the buffers), and
never in the cycle of the word before it.
"""
from . import fold_unit


def run(start, words, steps, take_word):
    """The cycles the `words` words are taken, for a job whose first cycle is `start` (the
    cycle after hw's `start` strobe); `take_word(i, ready)` is the cycle word i is taken
    when it is ready at `ready`."""
    taken, popped = [], []
    delay = fold_unit.out_delay(steps or 0)
    for i in range(words):
        if steps is None:
            ready = start + 1 if i == 0 else popped[-1] + 2
        else:
            taken.append(fold_unit.next_take(start, taken, popped, steps))
            ready = taken[-1] + delay
        if i:
            ready = max(ready, popped[-1] + 1)
        popped.append(take_word(i, ready))
    return popped

"""Model of hw/instruction_buffer.py: a FIFO of `ibuf_depth` taken descriptors. An entry
pushed at cycle p can be popped from p + POP_LATENCY on (the buffered FIFO's latency)."""
import collections
import dataclasses

POP_LATENCY = 2


@dataclasses.dataclass
class Entry:
    desc: object
    queue: int
    seq: int
    taken: int          # cycle the valid word matched: start of the completion's `cycles`
    ready: int = 0      # first cycle it can be popped


class InstructionBuffer:
    def __init__(self, depth):
        self.depth = depth
        self.entries = collections.deque()

    def full(self):
        return len(self.entries) >= self.depth

    def push(self, entry, cycle):
        entry.ready = cycle + POP_LATENCY
        self.entries.append(entry)

    def head(self):
        return self.entries[0] if self.entries else None

    def pop(self):
        return self.entries.popleft()

"""Model of hw/command_engine.py: doorbell -> valid word -> instruction buffer.

From IDLE with an eligible queue (round-robin after the last one served): LATCH, then
the read of the slot's first line: its address handshake three cycles after IDLE (later
when the arbiter presents a reader burst then), the line `dram_read_latency` cycles later,
after the reader bursts issued before it (the DRAM answers in order). A matching valid word is taken at that cycle and
pushed the next (waiting while the instruction buffer is full); otherwise the queue
backs off BACKOFF cycles.
"""
from isa.descriptor import Descriptor, DESC_WORD_BYTES
from isa.microarch import VALID_WORD_BACKOFF as BACKOFF
from isa.slots import SQ_VALID
from .instruction_buffer import Entry

ADDR_DELAY = 3           # IDLE -> address handshake: LATCH, ADDR (the request), the grant
WORDS_KEPT = 1 << 12     # descriptor words unpacked and kept


class CommandEngine:
    def __init__(self, cfg, memory):
        self.cfg, self.memory = cfg, memory
        n = cfg.num_queues
        self.next_seq = [1] * n
        self.backoff_until = [0] * n
        self.last = n - 1
        self.idle_at = 0                 # next cycle the engine is in IDLE
        self._words = {}                 # descriptor word -> Descriptor (see _unpack)

    def _unpack(self, word):
        """Descriptor.unpack, once per word: a Descriptor is immutable, and a stream's
        descriptors repeat (unpacking checks every field, which costs more than a dict)."""
        desc = self._words.get(word)
        if desc is None:
            if len(self._words) >= WORDS_KEPT:
                self._words.clear()
            desc = self._words[word] = Descriptor.unpack(word)
        return desc

    def reset_queue(self, q):
        self.next_seq[q] = 1
        self.backoff_until[q] = 0

    def eligible(self, regs, q, cycle):
        if not regs.enable:             # most queues of a poll, at no cost
            return False
        ahead = (regs.tail - (self.next_seq[q] - 1)) & 0xFFFFFFFF
        return 0 < ahead < (1 << 31) and cycle >= self.backoff_until[q] and regs.config_ok()

    def pick(self, queues, cycle):
        """The queue IDLE picks at `cycle`, or None."""
        n = len(queues)
        for k in range(1, n + 1):
            q = (self.last + k) % n
            if self.eligible(queues[q], q, cycle):
                return q
        return None

    def fetch(self, queues, q, cycle, grant):
        """Read the expected slot of queue q from IDLE at `cycle`; returns the entry taken
        (or None), the read's address handshake and the cycle its line arrived.
        `grant(request)` is the (address handshake, beat) of a read asked for at cycle
        `request`."""
        self.last = q
        regs = queues[q]
        handshake, arrival = grant(cycle + ADDR_DELAY - 1)
        seq = self.next_seq[q]
        line = self.memory.read(regs.slot_addr(regs.sq_base, seq), 64)
        if int.from_bytes(line[SQ_VALID:SQ_VALID + 8], "little") != seq:
            self.backoff_until[q] = arrival + 1 + BACKOFF
            self.idle_at = arrival + 1
            return None, handshake, arrival
        self.next_seq[q] = seq + 1
        desc = self._unpack(line[:DESC_WORD_BYTES])
        return Entry(desc, q, seq, taken=arrival), handshake, arrival

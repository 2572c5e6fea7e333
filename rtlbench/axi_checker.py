"""An AXI4 / AXI4-Lite protocol checker for cocotb, written from the AMBA AXI
specification (ARM IHI 0022E, "AMBA AXI and ACE Protocol Specification", Part A for AXI4,
Part B for AXI4-Lite; the section numbers below are that issue's), not from the RTL.

`AxiChecker(dut, prefix, clock, reset)` watches one port: the signals `<prefix>__<member>`
(`dram__arvalid`, ...) as the read-compute spec section 5 names them. It samples every
channel at each rising clock edge (the values a flop would capture there; in a cocotb
simulation, what `RisingEdge` reads) and checks the rules below. Every message names the
channel and the side at fault: the manager drives AW, W and AR, the subordinate B and R.

Per channel (AW, W, B, AR, R):

- `valid_stable`: once VALID is asserted it stays asserted until the cycle READY is
  (A3.2.1 Handshake process).
- `payload_stable`: every other signal of the channel (ID, address, length, size, burst,
  lock, cache, prot, qos, region, user, data, strobes, last, response) is stable while
  VALID is asserted and READY is not (A3.2.1). WDATA bytes whose WSTRB bit is low and
  RDATA bytes outside the beat's active lanes carry no data (A3.4.3) and are not compared.
- `valid_reset`: VALID low while reset is asserted, from its second rising edge on, and at
  the first rising edge after it is released: the earliest a manager or subordinate may
  drive VALID high is after a rising edge that sees reset deasserted (A3.1.2 Reset). The
  first edge of a reset is exempt: a synchronously reset interface (the device's, and the
  cocotbext-axi models') clears the registers that drive VALID at that edge, so VALID may
  still be high while the edge sees reset.
- `x`: VALID and READY resolvable (0 or 1) outside reset, and the payload while VALID
  (what AXI4's X-propagation rules ask; never fires on a two-state simulator).

Address channels (AW, AR; AXI4 only):

- `burst_reserved`: AxBURST is not the reserved 0b11 (A3.4.1 Burst type).
- `burst_type`: AxBURST is one of the types this port may carry (a constructor argument:
  the project's own rule, e.g. INCR only on the device's DRAM ports).
- `len`: FIXED at most 16 beats; WRAP 2, 4, 8 or 16 beats; INCR at most 256 (A3.4.1
  Burst length).
- `wrap_align`: a WRAP burst's start address is aligned to the transfer size (A3.4.1
  Burst type, wrapping burst restrictions).
- `size`: 2^AxSIZE is at most the data bus width in bytes (A3.4.1 Burst size).
- `boundary_4k`: a burst does not cross a 4 KiB boundary (A3.4.1 Burst length).
- `exclusive`: an exclusive access (AxLOCK = 1) moves a power of two bytes, at most 128,
  in at most 16 beats, from an address aligned to that total (A7.2.4 Exclusive access
  restrictions).
- `cache`: AxCACHE[3:2] is 0 when AxCACHE[1] (Modifiable) is 0, the other encodings being
  reserved (A4.4 Memory types, Table A4-5).
- `boundary` (project, optional): no burst crosses a `boundary`-byte boundary (the
  read-compute spec section 6: 256 bytes on a channel port).
- `interleave` (project, optional): a channel port's burst starts in one of its own
  granules, `(addr // granule) % channels == channel` (read-compute spec section 6).

Write data (W), matched to the AW bursts in order (AXI4 has no WID: write data comes in
the order of the addresses, A5.3 and A3.3.1):

- `w_last`: WLAST exactly on the AWLEN+1-th beat of each burst (A3.2.2 Write data
  channel, A3.4.1: no early termination). Write data may come before its address
  (A3.3.1, the AXI4 dependencies of Figure A3-7): beats ahead of their AW are kept and
  checked when the AW arrives, so a count mismatch is flagged only then, or as soon as a
  burst without an address has more beats than the AW then says.
- `w_strb`: WSTRB asserted only on the beat's active byte lanes, from the start address,
  size, burst type and beat number (A3.4.2 pseudocode, A3.4.3 Write strobes, Narrow
  transfers).
- `w_before_aw` (project, optional, `w_before_aw=False`): no W transfer before the AW
  transfer of its burst (the same cycle is allowed).

Responses:

- `b_no_request`: BVALID only for a write whose address transfer has completed, with
  BID the ID of an outstanding write (A3.3.1: the subordinate waits for AWVALID and
  AWREADY before asserting BVALID).
- `b_before_data`: BVALID only after the last data transfer (WLAST) of that write
  (A3.3.1: it waits for WVALID, WREADY and WLAST). The response of ID x answers the oldest
  outstanding write of ID x (A5.3: responses of one ID in the order of their addresses),
  so a response for a younger write of an ID before the older one's data is this error.
- `r_no_request`: RVALID only with the RID of an outstanding read whose address transfer
  has completed (A3.3.1, A5.2).
- `r_last`: RLAST exactly on the ARLEN+1-th beat of the burst it answers, which is the
  oldest outstanding read of that ID (A3.2.2 Read data channel, A5.3: read data of one ID
  in the order of the addresses; beats of different IDs may interleave).
- `b_exokay`, `r_exokay`: EXOKAY only for an exclusive access (A3.4.4 Read and write
  response structure, A7.2); never on AXI4-Lite (B1.1).

AXI4-Lite (`lite=True`, Part B): no ID or burst signals; every transaction is one beat
(B1.1 Definition of AXI4-Lite), so W beats pair with AW in order, B answers the oldest
write whose address and data have both transferred, R the oldest read (`b_no_request`,
`b_before_data`, `r_no_request`); the per-channel rules apply as for AXI4. The data bus
is 32 or 64 bits (B1.1; checked once, at the first edge).

A transfer completes at the rising edge where VALID and READY are both high; a response
seen at the same edge as the transfer it answers is early (its VALID was asserted
before that transfer completed).

On a violation the checker logs an error at once and records a `Violation` (time, port,
channel, side, rule, section, message) in `violations`. With `fail_fast` (the default)
the monitor coroutine (one per clock, started with `cocotb.start_soon` and shared by the
checkers of that clock) then raises `AxiProtocolError` listing the edge's violations:
cocotb 2.x fails the running test when a task it runs raises, at that simulated time,
whatever the test's own coroutine is awaiting; the test needs no call of its own.
`AxiProtocolError` is not an AssertionError, so a test marked `expect_fail` (which
passes on an AssertionError) still fails on a protocol violation. `check()` raises an
AssertionError listing every violation so far; `check(idle=True)` also lists the
transactions still outstanding (every request answered).
"""
import collections
import logging

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge

from isa.axi import BURST_FIXED, BURST_INCR, BURST_WRAP, RESP_EXOKAY, RESP_OKAY

BURST_NAMES = {BURST_FIXED: "FIXED", BURST_INCR: "INCR", BURST_WRAP: "WRAP", 3: "reserved"}

MANAGER, SUBORDINATE = "manager", "subordinate"
# each channel's members besides VALID and READY, by kind of port; missing ones are skipped
AXI4_MEMBERS = {
    "aw": ("id", "addr", "len", "size", "burst", "lock", "cache", "prot", "qos", "region", "user"),
    "w": ("data", "strb", "last", "user"),
    "b": ("id", "resp", "user"),
    "ar": ("id", "addr", "len", "size", "burst", "lock", "cache", "prot", "qos", "region", "user"),
    "r": ("id", "data", "resp", "last", "user"),
}
LITE_MEMBERS = {
    "aw": ("addr", "prot", "user"), "w": ("data", "strb", "user"), "b": ("resp", "user"),
    "ar": ("addr", "prot", "user"), "r": ("data", "resp", "user"),
}
STABILITY_ONLY = ("prot", "qos", "region", "user")
DRIVER = {"aw": MANAGER, "w": MANAGER, "b": SUBORDINATE, "ar": MANAGER, "r": SUBORDINATE}


class AxiProtocolError(Exception):
    """A protocol violation seen by an AxiChecker (deliberately not an AssertionError)."""


class Violation(collections.namedtuple("Violation", "time_ns port channel side who rule section message")):
    def __str__(self):
        who = f"{self.side} {self.who}" if self.who else self.side
        return (f"{self.time_ns:.0f} ns [{self.port}] {self.channel.upper()} ({who}): "
                f"{self.rule}: {self.message} ({self.section})")


def beat_lanes(addr, size, length, burst, beat, data_bytes):
    """The active byte lanes [lower, upper] of beat `beat` (0-based) of a burst, per the
    pseudocode of A3.4.2 (Address_N, Lower_Byte_Lane, Upper_Byte_Lane)."""
    nbytes = 1 << size
    aligned = addr // nbytes * nbytes
    if burst == BURST_FIXED or beat == 0:
        a = addr
    else:
        a = aligned + beat * nbytes
        if burst == BURST_WRAP:
            total = nbytes * length
            wrap_boundary = addr // total * total
            if a >= wrap_boundary + total:
                a -= total
    base = a // data_bytes * data_bytes
    lower = a - base
    upper = (a // nbytes * nbytes) + nbytes - 1 - base
    return lower, upper


def burst_span(addr, size, length, burst):
    """[first, last] byte addresses a burst touches (A3.4.1, A3.4.2)."""
    nbytes = 1 << size
    aligned = addr // nbytes * nbytes
    if burst == BURST_FIXED:
        return addr, aligned + nbytes - 1
    if burst == BURST_WRAP:
        total = nbytes * length
        lo = addr // total * total
        return lo, lo + total - 1
    return addr, aligned + nbytes * length - 1


def _reader(handle):
    """A function reading `handle` as an int, raising ValueError on X or Z bits. The value
    is read through the handle's simulator object (cocotb's own IntegerObject.get does the
    same), 3 to 6 times faster than building a cocotb Logic/LogicArray for each read,
    which matters at five channels per port per edge: a binary string for any width
    (X/Z make int() raise, on every simulator), the integer value directly for up to 32
    bits on Verilator, which is two-state. The public `int(handle.value)` if cocotb's
    internals differ."""
    raw = getattr(handle, "_handle", None)
    width = len(handle)
    if raw is not None and hasattr(raw, "get_signal_val_binstr") and hasattr(raw, "get_signal_val_long"):
        if width <= 32 and cocotb.SIM_NAME.lower().startswith("verilator"):
            get_long, wrap = raw.get_signal_val_long, 1 << width

            def read():
                value = get_long()
                return value + wrap if value < 0 else value
            return read
        get_binstr = raw.get_signal_val_binstr
        return lambda: int(get_binstr(), 2)
    return lambda: int(handle.value)


class _Channel:
    """One channel's handles and the state its stability check keeps between edges."""

    def __init__(self, dut, prefix, name, members):
        self.name = name
        self.valid = getattr(dut, f"{prefix}__{name}valid")
        self.ready = getattr(dut, f"{prefix}__{name}ready")
        self.fields = {}
        for member in members:
            try:
                self.fields[member] = getattr(dut, f"{prefix}__{name}{member}")
            except AttributeError:
                pass
        self.data = self.fields.pop("data", None)      # read only when needed (wide)
        # members no rule but stability reads: sampled only while a beat waits
        lazy = STABILITY_ONLY + (("strb",) if name == "w" else ())
        self.extra = {m: self.fields.pop(m) for m in lazy if m in self.fields}
        self.read_valid, self.read_ready = _reader(self.valid), _reader(self.ready)
        self.read_data = _reader(self.data) if self.data is not None else None
        # WSTRB: read with the other members only while a beat waits; otherwise only for
        # a beat whose lanes are not all active (AxiChecker._w_beat)
        self.strb = self.extra.get("strb")
        self.read_strb = _reader(self.strb) if self.strb is not None else None
        self.readers = [(m, h, _reader(h)) for m, h in self.fields.items()]
        self.extra_readers = [(m, h, _reader(h)) for m, h in self.extra.items()]
        self.stalled = None       # payload (dict, data) of the beat waiting for READY, or None

    def signal(self, member):
        return f"{self.name.upper()}{member.upper()}"


class _Write:
    """A write burst: its AW (None while data came first) and its W beats so far."""
    __slots__ = ("aw", "beats", "early", "done", "answered")

    def __init__(self, aw=None):
        self.aw = aw
        self.beats = 0            # W transfers so far
        self.early = []           # (time, strb, last) of beats that came before the AW
        self.done = False         # WLAST seen (or the burst ended by a flagged beat)
        self.answered = False     # its B transfer has happened (kept until done)


class _Sampler:
    """The one coroutine that samples every checker of a clock at each rising edge (one
    wake-up per edge for all ports, not one each), and raises AxiProtocolError for the
    fail-fast checkers' violations of that edge. It lives as long as the test that
    started it (cocotb ends a test's tasks with it); the next checker starts a new one."""
    _by_clock = {}

    def __init__(self, clock):
        self.clock = clock
        self.checkers = []
        self.task = cocotb.start_soon(self._run())

    @classmethod
    def join(cls, checker):
        sampler = cls._by_clock.get(checker.clock)
        if sampler is None or sampler.task.done():
            sampler = cls._by_clock[checker.clock] = cls(checker.clock)
        sampler.checkers.append(checker)
        return sampler

    def leave(self, checker):
        self.checkers.remove(checker)
        if not self.checkers:
            self.task.cancel()
            if self._by_clock.get(self.clock) is self:
                del self._by_clock[self.clock]

    async def _run(self):
        edge = RisingEdge(self.clock)
        while True:
            await edge
            found = []
            for checker in self.checkers:
                checker._sample()
                if checker._pending:
                    if checker.fail_fast:
                        found += checker._pending
                    checker._pending = []
            if found:
                raise AxiProtocolError("AXI protocol violation(s):\n  " + "\n  ".join(map(str, found)))


class AxiChecker:
    """Protocol checker of one AXI4 (or, with `lite=True`, AXI4-Lite) port.

    dut, prefix: signals `<prefix>__<member>` of `dut` (a trailing `_`, cocotbext-axi's
    style, is accepted). clock, reset: the port's clock and reset (active high unless
    `reset_active_low`); default `dut.clk` and `dut.rst` (no reset checks if None).
    bursts: the burst types the port may carry (project rule; AXI4 allows all three).
    w_before_aw: whether W transfers may precede their AW (AXI4 allows it).
    boundary, interleave: optional project rules (see the module docstring):
    `boundary` bytes, `interleave=(channel, channels, granule_bytes)`.
    manager, subordinate: names of the two sides, for the messages.
    fail_fast: raise AxiProtocolError from the monitor (failing the test) on a violation.
    The monitor starts at once (`cocotb.start_soon`); `stop()` ends it.
    """

    def __init__(self, dut, prefix, clock=None, reset=None, *, lite=False, bursts=(BURST_FIXED, BURST_INCR, BURST_WRAP),
                 w_before_aw=True, boundary=None, interleave=None, manager=None,
                 subordinate=None, reset_active_low=False, fail_fast=True, name=None):
        self.dut = dut
        self.prefix = prefix.rstrip("_")
        self.name = name or self.prefix
        self.clock = dut.clk if clock is None else clock
        self.reset = getattr(dut, "rst", None) if reset is None else reset
        self.reset_level = 0 if reset_active_low else 1
        self._read_reset = _reader(self.reset) if self.reset is not None else None
        self.lite = lite
        self.bursts = frozenset(bursts)
        self.w_before_aw = w_before_aw
        self.boundary = boundary
        self.interleave = interleave
        self.who = {MANAGER: manager, SUBORDINATE: subordinate}
        self.fail_fast = fail_fast
        self.log = logging.getLogger(f"cocotb.axi_checker.{self.name}")
        members = LITE_MEMBERS if lite else AXI4_MEMBERS
        self.ch = {name: _Channel(dut, self.prefix, name, members[name]) for name in members}
        self.data_bytes = len(self.ch["w"].data) // 8
        self._full_strb = (1 << self.data_bytes) - 1
        self.violations = []
        self.edges = 0
        self.transfers = collections.Counter()         # handshakes seen, per channel
        self._pending = []
        self._in_reset = False
        self._order = (("b", self._b), ("r", self._r), ("aw", self._aw), ("w", self._w), ("ar", self._ar))
        self._clear()
        self._sampler = _Sampler.join(self)

    # ---- public -------------------------------------------------------------------

    def stop(self):
        """End the monitor (its records stay readable)."""
        if self._sampler is not None:
            self._sampler.leave(self)
        self._sampler = None

    def outstanding(self):
        """Descriptions of the transactions not yet answered."""
        out = []
        for w in self._writes:
            if w.aw is None:
                out.append(f"{len(w.early)} W beats without an AW")
            elif not w.answered:
                out.append(f"write id={w.aw['id']:#x} addr={w.aw['addr']:#x}: "
                           + ("no B" if w.done else f"{w.beats} of {w.aw['len'] + 1} W beats, no B"))
        for rid, reads in self._reads.items():
            for r in reads:
                out.append(f"read id={rid:#x} addr={r['addr']:#x}: {r['beats']} of {r['len'] + 1} R beats")
        return out

    def check(self, idle=False):
        """Raise AssertionError listing every violation so far (and, with `idle`, every
        transaction still outstanding: a request with no response)."""
        problems = [str(v) for v in self.violations]
        if idle:
            problems += [f"[{self.name}] outstanding at the end: {o}" for o in self.outstanding()]
        if problems:
            raise AssertionError(f"AXI protocol checker [{self.name}]: {len(problems)} problem(s):\n  "
                                 + "\n  ".join(problems))

    # ---- the monitor ----------------------------------------------------------------

    def _clear(self):
        self._writes = []                                # _Write, in AW (and W) order
        self._reads = collections.defaultdict(collections.deque)   # id -> outstanding reads
        for ch in self.ch.values():
            ch.stalled = None

    def _violate(self, channel, rule, section, message, side=None):
        side = side or DRIVER[channel]
        v = Violation(get_sim_time("ns"), self.name, channel, side, self.who[side], rule, section, message)
        self.violations.append(v)
        self._pending.append(v)
        self.log.error("AXI protocol violation: %s", v)

    def _bit(self, handle, read, channel, what, side):
        try:
            return read()
        except ValueError:
            self._violate(channel, "x", "X-propagation", f"{what} is {handle.value} (not 0 or 1)", side)
            return None

    def _sample(self):
        self.edges += 1
        if self.edges == 1:
            widths = (32, 64) if self.lite else tuple(8 << i for i in range(8))
            if self.data_bytes * 8 not in widths:
                self._violate("w", "data_width", "B1.1" if self.lite else "A3.4.1 Burst size",
                              f"data bus of {self.data_bytes * 8} bits (allowed: {widths})")
        if self.reset is not None:
            try:
                level = self._read_reset()
            except ValueError:
                level = self.reset_level        # an unresolved reset counts as asserted
            if level == self.reset_level:
                if self._in_reset:              # the first edge clears a synchronous reset's registers
                    self._check_idle("while reset is asserted")
                self._in_reset = True
                self._clear()
                return
            if self._in_reset:
                self._in_reset = False
                self._check_idle("at the first rising edge after reset")
                self._clear()
        # responses first: a response may only answer transfers completed at earlier edges.
        # A channel with VALID low and no beat waiting has nothing to check (the fast path).
        for name, handler in self._order:
            ch = self.ch[name]
            try:
                valid = ch.read_valid()
            except ValueError:
                valid = None
            if valid == 0 and ch.stalled is None:
                continue
            handler(valid)

    def _check_idle(self, when):
        for name, ch in self.ch.items():
            try:
                high = ch.read_valid()
            except ValueError:
                continue                # any value but high is allowed here
            if high:
                self._violate(name, "valid_reset", "A3.1.2 Reset",
                              f"{name.upper()}VALID high {when}")

    def _value(self, name, ch, member, handle, read):
        """A payload member's value while VALID: X or Z bits are a violation, read as 0."""
        try:
            return read()
        except ValueError:
            shown = f"is {handle.value}" if handle is not None else "has X/Z bits"
            self._violate(name, "x", "X-propagation", f"{ch.signal(member)} {shown} while VALID")
            return 0

    def _handshake(self, name, valid):
        """Sample channel `name`: (ready, payload, new) when VALID is high, else None;
        `new`: the beat was not already waiting at the previous edge. Checks VALID and the
        payload against a beat stalled at the previous edge. The wide data and the members
        no rule but stability needs are read only while a beat waits (or just waited)."""
        ch = self.ch[name]
        stalled = ch.stalled
        if valid is None:
            valid = self._bit(ch.valid, ch.read_valid, name, f"{name.upper()}VALID", DRIVER[name])
        if not valid:
            if stalled is not None:
                if valid == 0:
                    self._violate(name, "valid_stable", "A3.2.1 Handshake process",
                                  f"{name.upper()}VALID deasserted before {name.upper()}READY "
                                  f"(beat {self._describe(stalled[0])})")
                ch.stalled = None
            return None
        ready = self._bit(ch.ready, ch.read_ready, name, f"{name.upper()}READY",
                          MANAGER if DRIVER[name] == SUBORDINATE else SUBORDINATE)
        payload = {member: self._value(name, ch, member, handle, read) for member, handle, read in ch.readers}
        data = None
        if stalled is not None or not ready:
            payload.update({member: self._value(name, ch, member, handle, read)
                            for member, handle, read in ch.extra_readers})
            if ch.data is not None:
                data = self._value(name, ch, "data", None, ch.read_data)
        if stalled is not None:
            old, old_data = stalled
            changed = [m for m in payload if payload[m] != old[m]]
            if changed:
                self._violate(name, "payload_stable", "A3.2.1 Handshake process",
                              "changed while VALID and not READY: "
                              + ", ".join(f"{ch.signal(m)} {old[m]:#x} -> {payload[m]:#x}" for m in changed))
            elif data != old_data:
                mask = self._data_mask(name, payload)
                if (data ^ old_data) & mask:
                    self._violate(name, "payload_stable", "A3.2.1 Handshake process",
                                  f"{ch.signal('data')} changed while VALID and not READY "
                                  f"(bytes {self._bytes_of((data ^ old_data) & mask)})")
        if ready:
            self.transfers[name] += 1
            ch.stalled = None
        else:
            ch.stalled = (dict(payload), data)
        return ready, payload, stalled is None

    @staticmethod
    def _describe(payload):
        return " ".join(f"{k}={v:#x}" for k, v in payload.items())

    def _bytes_of(self, diff):
        return [i for i in range(self.data_bytes) if (diff >> (8 * i)) & 0xFF]

    def _data_mask(self, name, payload):
        """The data bits that carry data: WSTRB's bytes (W), the active lanes (R)."""
        full = (1 << (8 * self.data_bytes)) - 1
        if name == "w":
            strb = payload.get("strb")
            if strb is None:
                return full
            return sum(0xFF << (8 * i) for i in range(self.data_bytes) if (strb >> i) & 1)
        if self.lite:
            return full
        reads = self._reads.get(payload.get("id", 0))
        if not reads:
            return full
        r = reads[0]
        if (1 << r["size"]) > self.data_bytes:
            return full
        lo, hi = beat_lanes(r["addr"], r["size"], r["len"] + 1, r["burst"], r["beats"], self.data_bytes)
        return sum(0xFF << (8 * i) for i in range(lo, hi + 1))

    # ---- address channels -------------------------------------------------------------

    def _address(self, name, valid):
        got = self._handshake(name, valid)
        if got is None:
            return None
        ready, p, new = got
        p.setdefault("id", 0)
        p.setdefault("len", 0)
        p.setdefault("size", max(self.data_bytes.bit_length() - 1, 0))
        p.setdefault("burst", BURST_INCR)
        p.setdefault("lock", 0)
        if new and not self.lite:
            self._burst_rules(name, p)
        return ready, p

    def _burst_rules(self, name, p):
        A = name.upper()
        addr, size, length, burst = p["addr"], p["size"], p["len"] + 1, p["burst"]
        what = f"{A}ADDR={addr:#x} {A}LEN={p['len']} {A}SIZE={size} {A}BURST={BURST_NAMES[burst & 3]}"
        if burst == 3:
            self._violate(name, "burst_reserved", "A3.4.1 Burst type", f"reserved {A}BURST 0b11: {what}")
            return
        if burst not in self.bursts:
            allowed = ", ".join(BURST_NAMES[b] for b in sorted(self.bursts))
            self._violate(name, "burst_type", "project rule", f"{BURST_NAMES[burst]} burst on a port "
                          f"that carries only {allowed}: {what}")
        if burst == BURST_FIXED and length > 16:
            self._violate(name, "len", "A3.4.1 Burst length", f"FIXED burst of {length} beats (at most 16): {what}")
        elif burst == BURST_WRAP and length not in (2, 4, 8, 16):
            self._violate(name, "len", "A3.4.1 Burst length", f"WRAP burst of {length} beats "
                          f"(2, 4, 8 or 16): {what}")
        elif burst == BURST_INCR and length > 256:
            self._violate(name, "len", "A3.4.1 Burst length", f"INCR burst of {length} beats (at most 256): {what}")
        if (1 << size) > self.data_bytes:
            self._violate(name, "size", "A3.4.1 Burst size", f"transfer of {1 << size} bytes on a "
                          f"{self.data_bytes}-byte data bus: {what}")
        if burst == BURST_WRAP and addr % (1 << size):
            self._violate(name, "wrap_align", "A3.4.1 Burst type", f"WRAP burst start not aligned to the "
                          f"transfer size: {what}")
        lo, hi = burst_span(addr, size, length, burst)
        if lo >> 12 != hi >> 12:
            self._violate(name, "boundary_4k", "A3.4.1 Burst length", f"burst over bytes {lo:#x}..{hi:#x} "
                          f"crosses a 4 KiB boundary: {what}")
        if self.boundary and lo // self.boundary != hi // self.boundary:
            self._violate(name, "boundary", "project rule (read-compute spec 6)", f"burst over bytes "
                          f"{lo:#x}..{hi:#x} crosses a {self.boundary}-byte boundary: {what}")
        if self.interleave:
            channel, channels, granule = self.interleave
            if (addr // granule) % channels != channel:
                self._violate(name, "interleave", "project rule (read-compute spec 6)", f"address {addr:#x} is "
                              f"channel {(addr // granule) % channels}'s, not this port's ({channel}): {what}")
        if p["lock"]:
            total = length << size
            if length > 16 or total > 128 or total & (total - 1) or addr % total:
                self._violate(name, "exclusive", "A7.2.4 Exclusive access restrictions",
                              f"exclusive access of {total} bytes in {length} beats at {addr:#x} (a power of "
                              f"two bytes up to 128, at most 16 beats, aligned to the total): {what}")
        cache = p.get("cache")
        if cache is not None and not cache & 0b10 and cache & 0b1100:
            self._violate(name, "cache", "A4.4 Memory types", f"{A}CACHE={cache:#06b}: bits 3:2 set on a "
                          f"non-modifiable access (reserved encoding): {what}")

    def _aw(self, valid):
        got = self._address("aw", valid)
        if got is None or not got[0]:
            return
        aw = got[1]
        for w in self._writes:            # the oldest burst whose data came first gets this address
            if w.aw is None:
                w.aw = aw
                early, w.early = w.early, []
                for n, (t, strb, last) in enumerate(early):
                    self._w_beat(w, n, strb, last, when=f" (beat at {t:.0f} ns, before its AW)")
                    if w.done:
                        break               # more beats than AWLEN+1: flagged (no WLAST) above
                return
        self._writes.append(_Write(aw))

    def _w(self, valid):
        got = self._handshake("w", valid)
        if got is None or not got[0]:
            return
        p = got[1]
        strb = p.get("strb")              # None: not read yet (see _w_beat)
        last = 1 if self.lite else p.get("last", 1)
        for w in self._writes:            # the oldest burst still taking data
            if not w.done:
                break
        else:
            w = _Write()
            self._writes.append(w)
        if w.aw is None:
            if not self.w_before_aw:
                self._violate("w", "w_before_aw", "project rule", "W transfer before the AW transfer of its burst")
            w.early.append((get_sim_time("ns"), self._strb() if strb is None else strb, last))
            w.done = bool(last)
            return
        self._w_beat(w, w.beats, strb, last)

    def _w_beat(self, w, n, strb, last, when=""):
        """Beat n (0-based) of write burst w, whose AW is known. WSTRB (`strb`, None if not
        read yet) is read only when the beat has inactive lanes: any strobes are legal on a
        full-width beat."""
        aw = w.aw
        w.beats = n + 1
        length = aw["len"] + 1
        if not self.lite:
            if last and n + 1 < length:
                self._violate("w", "w_last", "A3.2.2 Write data channel",
                              f"WLAST on beat {n + 1} of a {length}-beat burst (AWADDR={aw['addr']:#x}){when}")
            elif not last and n + 1 == length:
                self._violate("w", "w_last", "A3.2.2 Write data channel",
                              f"no WLAST on beat {length}, the last of the burst (AWADDR={aw['addr']:#x}){when}")
            if (1 << aw["size"]) <= self.data_bytes and aw["burst"] != 3:
                lo, hi = beat_lanes(aw["addr"], aw["size"], length, aw["burst"], n, self.data_bytes)
                allowed = ((1 << (hi - lo + 1)) - 1) << lo
                if strb is None and allowed != self._full_strb:
                    strb = self._strb()
                if strb is not None and strb & ~allowed:
                    self._violate("w", "w_strb", "A3.4.3 Write strobes",
                                  f"WSTRB={strb:#x} on beat {n + 1} of AWADDR={aw['addr']:#x} AWSIZE={aw['size']} "
                                  f"AWBURST={BURST_NAMES[aw['burst']]}: only lanes {lo}..{hi} are active{when}")
        w.done = bool(last) or n + 1 >= length
        self._retire(w)

    def _strb(self):
        ch = self.ch["w"]
        if ch.read_strb is None:
            return self._full_strb
        try:
            return ch.read_strb()
        except ValueError:
            self._violate("w", "x", "X-propagation", f"WSTRB is {ch.strb.value} while VALID")
            return 0

    def _retire(self, w):
        if w.done and w.answered:
            self._writes.remove(w)

    def _ar(self, valid):
        got = self._address("ar", valid)
        if got is None or not got[0]:
            return
        ar = dict(got[1], beats=0)
        self._reads[ar["id"]].append(ar)

    # ---- responses -------------------------------------------------------------------

    def _b(self, valid):
        got = self._handshake("b", valid)
        if got is None:
            return
        ready, p, new = got
        bid = p.get("id", 0)
        w = next((w for w in self._writes if w.aw is not None and not w.answered and w.aw["id"] == bid), None)
        if new:
            if w is None:
                self._violate("b", "b_no_request", "A3.3.1 Dependencies between channel handshake signals",
                              f"BVALID with BID={bid:#x}, but no write of that ID has completed its AW transfer")
            elif not w.done:
                self._violate("b", "b_before_data", "A3.3.1 Dependencies between channel handshake signals",
                              f"BVALID with BID={bid:#x} before the last W transfer of its oldest outstanding "
                              f"write (AWADDR={w.aw['addr']:#x}, {w.beats} of {w.aw['len'] + 1} beats)")
            resp = p.get("resp", RESP_OKAY)
            if resp == RESP_EXOKAY and (self.lite or (w is not None and not w.aw["lock"])):
                self._violate("b", "b_exokay", "B1.1" if self.lite else "A3.4.4 Read and write response structure",
                              f"EXOKAY response to a non-exclusive write{' (AXI4-Lite has none)' if self.lite else ''}")
        if ready and w is not None:
            w.answered = True
            self._retire(w)

    def _r(self, valid):
        got = self._handshake("r", valid)
        if got is None:
            return
        ready, p, new = got
        rid = p.get("id", 0)
        reads = self._reads.get(rid)
        r = reads[0] if reads else None
        last = 1 if self.lite else p.get("last", 1)
        if new:
            if r is None:
                self._violate("r", "r_no_request", "A3.3.1 Dependencies between channel handshake signals",
                              f"RVALID with RID={rid:#x}, but no read of that ID is outstanding")
            elif not self.lite:
                n, length = r["beats"] + 1, r["len"] + 1
                if last and n < length:
                    self._violate("r", "r_last", "A3.2.2 Read data channel",
                                  f"RLAST on beat {n} of a {length}-beat burst (RID={rid:#x}, ARADDR={r['addr']:#x})")
                elif not last and n == length:
                    self._violate("r", "r_last", "A3.2.2 Read data channel",
                                  f"no RLAST on beat {length}, the last of the burst (RID={rid:#x}, "
                                  f"ARADDR={r['addr']:#x})")
            resp = p.get("resp", RESP_OKAY)
            if resp == RESP_EXOKAY and (self.lite or (r is not None and not r["lock"])):
                self._violate("r", "r_exokay", "B1.1" if self.lite else "A3.4.4 Read and write response structure",
                              f"EXOKAY response to a non-exclusive read{' (AXI4-Lite has none)' if self.lite else ''}")
        if ready and r is not None:
            r["beats"] += 1
            if last or r["beats"] > r["len"]:
                reads.popleft()


# ---- the project's ports ------------------------------------------------------------

def device_checkers(dut, cfg, clock=None, reset=None):
    """One checker per bus port of `ndp_device` (read-compute spec sections 5 and 6):
    `mem` (AXI4, the device its subordinate), `io` (AXI4-Lite, subordinate), and `dram`
    or `dram0` .. `dram<C-1>` (AXI4, the device its manager). On the DRAM ports the
    project promises more than AXI4 asks (docs/read-compute-project.md, Bus behaviour;
    spec section 6), and the checkers hold it to that: INCR bursts only, no W beat ahead
    of its AW, and with C > 1 channels no burst over a 256-byte granule and every burst
    on its own channel's granules."""
    bench = "bench (cocotbext-axi)"
    checkers = [AxiChecker(dut, "mem", clock, reset, manager=bench, subordinate="ndp_device"),
                AxiChecker(dut, "io", clock, reset, lite=True, manager=bench, subordinate="ndp_device")]
    channels = cfg.dram_channels
    for c in range(channels):
        multi = channels > 1
        checkers.append(AxiChecker(dut, f"dram{c}" if multi else "dram", clock, reset, bursts=(BURST_INCR,),
                                   w_before_aw=False, boundary=256 if multi else None,
                                   interleave=(c, channels, 256) if multi else None,
                                   manager="ndp_device", subordinate="bench (AxiRam)"))
    return checkers

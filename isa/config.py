"""Device configurations as data: `configs/<name>.json` beside this file.

A config names the few free parameters; the rest is derived here, once, for the RTL
generator, the model and the driver alike.
"""
import dataclasses
import functools
import json
import pathlib

from .microarch import HOST_BURSTS_IN_FLIGHT, WRITES_IN_FLIGHT
from .pe_array import SPLIT_ROWS

CONFIG_DIR = pathlib.Path(__file__).parent / "configs"
GRANULE_BYTES = 256      # HDM interleaving granule across DRAM channels (spec section 6)


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    name: str
    lanes: int             # FP16 elements taken from DRAM per cycle (= channels x port width / 16)
    rows: int              # input rows computed in parallel
    num_queues: int
    in_buf_bytes: int      # input buffer: rows banks of k_max FP16 elements
    out_buf_bytes: int     # output buffer: rows x n_max FP32 accumulators
    dram_buf_bytes: int    # DRAM buffer: FIFO of DRAM read beats
    ibuf_depth: int = 4    # instruction buffer entries
    dram_max_reads: int = 2  # read bursts the control unit keeps in flight
    clock_hz: float = 1e9
    # the memory behind the dram port, as the cycle model sees it (cycles):
    dram_read_latency: int = 2      # AR handshake -> first R beat
    dram_write_latency: int = 2     # last W beat -> B response
    dram_bytes: int = 1 << 26       # device DRAM (HDM) capacity
    # the CXL link between host/GPU and device, for end-to-end estimates
    link_bytes_per_s: float = 128e9
    link_latency_s: float = 200e-9
    dram_channels: int = 1  # DRAM channels, HDM interleaved across them in 256-byte granules (spec 6)
    data_bits: int = 512   # width of the mem port and of each DRAM channel's port (spec 5, 6)
    addr_bits: int = 64
    id_bits: int = 8
    user_bits: int = 20
    io_addr_bits: int = 16
    io_data_bits: int = 32

    def __post_init__(self):
        def need(cond, what):
            if not cond:
                raise ValueError(f"config {self.name!r}: {what}")
        need(self.data_bits == 512, f"data_bits must be 512, the spec's port width (sections 5, 6), "
             f"got {self.data_bits!r}; a wider DRAM is several channels (dram_channels)")
        need(self.dram_channels >= 1 and self.dram_channels & (self.dram_channels - 1) == 0
             and self.dram_channels <= 64,
             f"dram_channels must be a power of two from 1 to 64, got {self.dram_channels!r}")
        need(self.lanes == self.dram_channels * self.data_bits // 16,
             f"lanes must equal the channels' width in FP16 elements "
             f"({self.dram_channels} x {self.data_bits // 16} = {self.dram_channels * self.data_bits // 16}), "
             f"got {self.lanes!r}")
        need(self.rows >= SPLIT_ROWS, f"rows must be >= {SPLIT_ROWS} (a one-row stage spreads its k-groups "
             f"over {SPLIT_ROWS} PE rows, isa/pe_array.py), got {self.rows!r}")
        need(1 <= self.num_queues <= 16, f"num_queues must be 1..16, got {self.num_queues!r}")
        need(self.k_max >= self.lanes and self.k_max % self.lanes == 0,
             f"in_buf_bytes={self.in_buf_bytes!r} must hold rows x a multiple of lanes FP16 elements")
        need(self.n_max >= self.lanes and self.n_max % self.lanes == 0,
             f"out_buf_bytes={self.out_buf_bytes!r} must hold rows x a multiple of lanes FP32 accumulators")
        need(self.dram_buf_beats >= 2 and self.dram_buf_beats & (self.dram_buf_beats - 1) == 0,
             f"dram_buf_bytes={self.dram_buf_bytes!r} must be a power of two of at least 2 beats")
        need(self.n_max >= 4 * self.lanes,
             f"out_buf_bytes={self.out_buf_bytes!r} must hold rows x 4 words of lanes accumulators "
             "(the interleaved partial sums of isa/pe_array.py)")
        need(self.dram_max_reads >= 1, f"dram_max_reads must be >= 1, got {self.dram_max_reads!r}")
        need(self.ibuf_depth >= 1 and self.ibuf_depth & (self.ibuf_depth - 1) == 0,
             f"ibuf_depth must be a power of two, got {self.ibuf_depth!r}")

    @property
    def macs(self):
        return self.lanes * self.rows

    @property
    def peak_flops(self):
        return 2 * self.macs * self.clock_hz

    @property
    def dram_bytes_per_s(self):
        return self.beat_bytes * self.clock_hz

    @functools.cached_property
    def port_bytes(self):
        """Bytes per beat of the mem port and of each DRAM channel: one 64-byte line."""
        return self.data_bits // 8

    @functools.cached_property
    def beat_bytes(self):
        """Bytes of one beat of the device's internal data path: a line of every channel."""
        return self.port_bytes * self.dram_channels

    @functools.cached_property
    def beat_bits(self):
        return 8 * self.beat_bytes

    @functools.cached_property
    def stripe_bytes(self):
        """Bytes of HDM that hold one 256-byte granule of every channel (spec 6)."""
        return GRANULE_BYTES * self.dram_channels

    @functools.cached_property
    def k_max(self):
        """Largest K (input columns) the input buffer holds."""
        return self.in_buf_bytes // (2 * self.rows)

    @functools.cached_property
    def n_max(self):
        """Largest N (output columns) the output buffer's accumulators hold."""
        return self.out_buf_bytes // (4 * self.rows)

    @functools.cached_property
    def dram_buf_beats(self):
        return self.dram_buf_bytes // self.beat_bytes

    @functools.cached_property
    def bus_reads_in_flight(self):
        """Read bursts the internal bus can have outstanding: the control unit's reader, the
        command engine's one and the host path's (the arbiter's routing FIFO)."""
        return self.dram_max_reads + 1 + HOST_BURSTS_IN_FLIGHT

    @functools.cached_property
    def bus_writes_in_flight(self):
        """Write bursts the internal bus can have outstanding: the control unit's and the host's."""
        return WRITES_IN_FLIGHT + HOST_BURSTS_IN_FLIGHT

    @functools.cached_property
    def burst_boundary(self):
        """No burst of the device's data path crosses a multiple of this many bytes: 4 KiB
        (AXI4's rule) on one channel; with several, a stripe, so that a burst holds at
        most one granule per channel, and each channel's part never crosses a granule."""
        return 4096 if self.dram_channels == 1 else min(4096, self.stripe_bytes)

    @functools.cached_property
    def max_burst_beats(self):
        """Longest burst the device issues: to the burst boundary, and at most half the DRAM buffer."""
        return min(self.burst_boundary // self.beat_bytes, self.dram_buf_beats // 2)


def read_config(folder, kind, name_or_path):
    """The fields of config `<folder>/<name>.json`, or of a .json path: keys starting with
    '_' (comments) dropped, `name` the file's stem unless the file sets it."""
    path = pathlib.Path(name_or_path)
    if path.suffix != ".json":
        path = pathlib.Path(folder) / f"{name_or_path}.json"
    if not path.exists():
        known = sorted(p.stem for p in pathlib.Path(folder).glob("*.json"))
        raise FileNotFoundError(f"no {kind} config {str(name_or_path)!r}; known: {known}")
    data = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    data.setdefault("name", path.stem)
    return data


def parse_value(text):
    """A config value written as text (a CLI's KEY=VALUE, a CSV cell): int, float, null,
    true, false, else the string itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"null": None, "true": True, "false": False}.get(text, text)


def parse_overrides(items, what="KNOB"):
    """`KEY=VALUE` strings to a dict of parsed values; ValueError naming a malformed one."""
    changes = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected {what}=VALUE, got {item!r}")
        changes[key] = parse_value(value)
    return changes


def load_config(name_or_path="default"):
    return DeviceConfig(**read_config(CONFIG_DIR, "device", name_or_path))

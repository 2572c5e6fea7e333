"""Device configurations as data: `configs/<name>.json` beside this file.

A config names the few free parameters; the rest is derived here, once, for the RTL
generator, the model and the driver alike.
"""
import dataclasses
import functools
import json
import pathlib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from .microarch import HOST_BURSTS_IN_FLIGHT, WRITES_IN_FLIGHT, softmax_lines_clear
from .pe_array import SPLIT_ROWS

CONFIG_DIR = pathlib.Path(__file__).parent / "configs"
GRANULE_BYTES = 256      # HDM interleaving granule across DRAM channels (spec section 6)
if TYPE_CHECKING:
    from _typeshed import DataclassInstance
_T = TypeVar("_T", bound="DataclassInstance")    # a config class: a dataclass


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
    # lanes of the softmax unit (hw/softmax_unit.py): it takes a line of `lanes` scores as
    # lanes / softmax_lanes words of its own, one a cycle, so it reads a line only every few
    # cycles (SOFTMAX in place on a one-port input bank) and is sized to the rate scores
    # arrive at (a q K^T stage makes macs / head_dim a cycle); 0: lanes / 4
    softmax_lanes: int = 0

    def __post_init__(self) -> None:
        def need(cond: bool, what: str) -> None:
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
        if self.softmax_lanes == 0:
            object.__setattr__(self, "softmax_lanes", self.lanes // 4)
        need(2 <= self.softmax_lanes <= self.lanes and self.softmax_lanes & (self.softmax_lanes - 1) == 0,
             f"softmax_lanes must be a power of two from 2 to lanes ({self.lanes}), got {self.softmax_lanes!r}")
        need(softmax_lines_clear(self.lanes // self.softmax_lanes),
             f"softmax_lanes={self.softmax_lanes!r}: with {self.lanes // self.softmax_lanes} of its words a "
             f"line the softmax unit would read and write an input bank in one cycle (its one port: "
             f"isa/microarch.py softmax_lines_clear); take lanes / 4 or fewer")
        need(self.ibuf_depth >= 1 and self.ibuf_depth & (self.ibuf_depth - 1) == 0,
             f"ibuf_depth must be a power of two, got {self.ibuf_depth!r}")

    @property
    def macs(self) -> int:
        return self.lanes * self.rows

    @property
    def peak_flops(self) -> float:
        return 2 * self.macs * self.clock_hz

    @property
    def dram_bytes_per_s(self) -> float:
        return self.beat_bytes * self.clock_hz

    @functools.cached_property
    def port_bytes(self) -> int:
        """Bytes per beat of the mem port and of each DRAM channel: one 64-byte line."""
        return self.data_bits // 8

    @functools.cached_property
    def beat_bytes(self) -> int:
        """Bytes of one beat of the device's internal data path: a line of every channel."""
        return self.port_bytes * self.dram_channels

    @functools.cached_property
    def beat_bits(self) -> int:
        return 8 * self.beat_bytes

    @functools.cached_property
    def stripe_bytes(self) -> int:
        """Bytes of HDM that hold one 256-byte granule of every channel (spec 6)."""
        return GRANULE_BYTES * self.dram_channels

    @functools.cached_property
    def k_max(self) -> int:
        """Largest K (input columns) the input buffer holds."""
        return self.in_buf_bytes // (2 * self.rows)

    @functools.cached_property
    def n_max(self) -> int:
        """Largest N (output columns) the output buffer's accumulators hold."""
        return self.out_buf_bytes // (4 * self.rows)

    @functools.cached_property
    def dram_buf_beats(self) -> int:
        return self.dram_buf_bytes // self.beat_bytes

    @functools.cached_property
    def bus_reads_in_flight(self) -> int:
        """Read bursts the internal bus can have outstanding: the control unit's reader, the
        command engine's one and the host path's (the arbiter's routing FIFO)."""
        return self.dram_max_reads + 1 + HOST_BURSTS_IN_FLIGHT

    @functools.cached_property
    def bus_writes_in_flight(self) -> int:
        """Write bursts the internal bus can have outstanding: the control unit's and the host's."""
        return WRITES_IN_FLIGHT + HOST_BURSTS_IN_FLIGHT

    @functools.cached_property
    def burst_boundary(self) -> int:
        """No burst of the device's data path crosses a multiple of this many bytes: 4 KiB
        (AXI4's rule) on one channel; with several, a stripe, so that a burst holds at
        most one granule per channel, and each channel's part never crosses a granule."""
        return 4096 if self.dram_channels == 1 else min(4096, self.stripe_bytes)

    @functools.cached_property
    def max_burst_beats(self) -> int:
        """Longest burst the device issues: to the burst boundary, and at most half the DRAM buffer."""
        return min(self.burst_boundary // self.beat_bytes, self.dram_buf_beats // 2)


class ConfigError(ValueError):
    """A config that cannot be used: a file missing or malformed, a field unknown or of a bad
    value. The message names the file (or the config) and the field; `path` and `field` hold
    them where known. A ValueError, so callers that caught ValueError still do; the CLI turns
    it into one `Error:` line."""

    def __init__(self, message: str, path: str | pathlib.Path | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.field = field


class ConfigNotFound(ConfigError, FileNotFoundError):
    """No such config: neither a name in the configs folder nor a .json path that exists
    (a FileNotFoundError as well, as before)."""


def shown_path(path: str | pathlib.Path) -> str:
    """A path as a message shows it: relative to the working directory when under it."""
    path = pathlib.Path(path)
    try:
        return str(path.resolve().relative_to(pathlib.Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_path(folder: str | pathlib.Path, kind: str, name_or_path: str | pathlib.Path) -> pathlib.Path:
    """The file of config `name_or_path`: `<folder>/<name>.json`, or a .json path;
    ConfigNotFound listing the configs in `folder` when there is none."""
    path = pathlib.Path(name_or_path)
    if path.suffix != ".json":
        path = pathlib.Path(folder) / f"{name_or_path}.json"
        if not path.is_file():
            known = sorted(p.stem for p in pathlib.Path(folder).glob("*.json"))
            raise ConfigNotFound(f"no {kind} config {str(name_or_path)!r}; known: {', '.join(known) or 'none'} "
                                 f"(in {shown_path(folder)}), or a path to a .json file", path=path)
    elif not path.is_file():
        known = sorted(p.stem for p in pathlib.Path(folder).glob("*.json"))
        raise ConfigNotFound(f"no {kind} config file {str(name_or_path)!r}; known by name: "
                             f"{', '.join(known) or 'none'} (in {shown_path(folder)})", path=path)
    return path


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "true/false", int: "number",
               float: "number", type(None): "null"}


def read_config(folder: str | pathlib.Path, kind: str, name_or_path: str | pathlib.Path) -> dict[str, Any]:
    """The fields of config `<folder>/<name>.json`, or of a .json path: keys starting with
    '_' (comments) dropped, `name` the file's stem unless the file sets it. ConfigError
    (ConfigNotFound) naming the file for a missing file, malformed JSON or a JSON value that
    is not an object."""
    path = config_path(folder, kind, name_or_path)
    where = f"{kind} config {shown_path(path)}"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read it: {exc}", path=path) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                          path=path) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a JSON object of fields ({{\"field\": value, ...}}), "
                          f"got a JSON {_JSON_TYPES.get(type(raw), type(raw).__name__)}", path=path)
    data = {k: v for k, v in raw.items() if not k.startswith("_")}
    data.setdefault("name", path.stem)
    return data


def field_names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def check_fields(cls: Any, data: dict[str, Any], where: str, what: str = "field") -> None:
    """ConfigError naming the first key of `data` that `cls` (a dataclass) has no field for,
    with the valid ones."""
    valid = field_names(cls)
    unknown = [k for k in data if k not in valid]
    if unknown:
        raise ConfigError(f"{where}: unknown {what}s {unknown!r}; the valid {what}s: {', '.join(valid)}",
                          field=unknown[0])


def _type_ok(value: object, kind: object) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if kind is tuple:
        return isinstance(value, (list, tuple))
    return True


def _type_error(field: dataclasses.Field[Any], value: object) -> str | None:
    """What is wrong with `value` for dataclass field `field` if it is not of the field's plain
    type (int, float, str, bool, tuple; null where the default is None), else None."""
    if field.type not in (bool, int, float, str, tuple) or (value is None and field.default is None):
        return None
    if _type_ok(value, field.type):
        return None
    wanted = {bool: "true or false", int: "an integer", float: "a number", str: "a string", tuple: "a list"}
    return (f"{field.name} must be {wanted[field.type]}{' or null' if field.default is None else ''}, "
            f"got {value!r}")


def check_types(cls: Any, data: dict[str, Any], where: str) -> None:
    """ConfigError naming the first field of `data` whose value is not of its field's plain type."""
    for f in dataclasses.fields(cls):
        problem = _type_error(f, data[f.name]) if f.name in data else None
        if problem:
            raise ConfigError(f"{where}: {problem}", field=f.name)


def build_config(cls: type[_T], folder: str | pathlib.Path, kind: str, name_or_path: str | pathlib.Path,
                 overrides: dict[str, Any] | None = None, what: str = "field") -> _T:
    """`cls(**fields)` from config `name_or_path` (see read_config) with `overrides` applied:
    ConfigError naming the file and the field for an unknown field (the valid ones listed),
    a missing one, a value of the wrong type, or one the class refuses. A problem in the file
    reads '<kind> config <path>: ...'; one in an override '<kind> config '<name>': ... (overridden)'."""
    data = read_config(folder, kind, name_or_path)
    path = config_path(folder, kind, name_or_path)
    in_file = f"{kind} config {shown_path(path)}"
    check_fields(cls, data, in_file, what)
    overrides = overrides or {}
    if overrides:
        check_fields(cls, overrides, f"{kind} config {str(name_or_path)!r} (overrides)", what)
        data.update(overrides)

    def error(field: str | None, text: str) -> ConfigError:
        if field in overrides:
            return ConfigError(f"{kind} config {data.get('name')!r}: {text} (overridden)", path=path, field=field)
        return ConfigError(f"{in_file}: {text}", path=path, field=field)

    for f in dataclasses.fields(cls):
        problem = _type_error(f, data[f.name]) if f.name in data else None
        if problem:
            raise error(f.name, problem)
    try:
        return cls(**data)
    except TypeError as exc:       # a required field missing
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in data
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        raise error(missing[0] if missing else None,
                    f"missing {what}s {missing!r}" if missing else str(exc)) from None
    except ConfigError:
        raise
    except ValueError as exc:      # the class's own checks: '<kind> config 'name': <field> must ...'
        text = str(exc)
        for prefix in (f"{kind} config {data.get('name')!r}: ", f"config {data.get('name')!r}: "):
            if text.startswith(prefix):
                text = text[len(prefix):]
                break
        field = next((f.name for f in dataclasses.fields(cls) if re.match(rf"{f.name}\b", text)), None)
        raise error(field, text) from None


def parse_value(text: str) -> Any:
    """A config value written as text (a CLI's KEY=VALUE, a CSV cell): int, float, null,
    true, false, else the string itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"null": None, "true": True, "false": False}.get(text, text)


def parse_overrides(items: Iterable[str], what: str = "KNOB") -> dict[str, Any]:
    """`KEY=VALUE` strings to a dict of parsed values; ValueError naming a malformed one."""
    changes: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected {what}=VALUE, got {item!r}", field=key or None)
        changes[key] = parse_value(value)
    return changes


def load_config(name_or_path: str | pathlib.Path = "default") -> DeviceConfig:
    return build_config(DeviceConfig, CONFIG_DIR, "device", name_or_path)

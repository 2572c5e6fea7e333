"""The one definition of the read-compute interface (spec: shared/spec/read-compute.md).

Plain Python, importable without Amaranth or cocotb. `hw/` (the RTL), `sim/` (the
model), `driver/` (the host side) and `tests/` all import their names, offsets and
encodings from here, so that none of them can drift from the others.
"""
from . import regs, slots
from .config import DeviceConfig, load_config
from .descriptor import DESC_BITS, DESC_WORD_BYTES, FIELDS, Descriptor, DescType, Dtype, Flag, Op, dtype_bytes
from .status import Status
from .validate import QueueView, check_descriptor, payload_bytes, result_bytes

__all__ = ["Status", "Descriptor", "DescType", "Op", "Dtype", "Flag", "FIELDS", "DESC_BITS",
           "DESC_WORD_BYTES", "dtype_bytes", "DeviceConfig", "load_config", "regs", "slots",
           "QueueView", "check_descriptor", "payload_bytes", "result_bytes"]

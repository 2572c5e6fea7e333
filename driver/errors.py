"""Exceptions of the host driver. Every one derives from `NdpError` (isa/errors.py, with
the argument errors ArgumentError and ShapeError, which the descriptor encoders raise too).
"""
from typing import Any

from isa import Status
from isa.errors import NdpError


class DeviceNotFound(NdpError):
    """The ID register does not read isa.regs.ID_VALUE: no NDP device answers there."""


class RegisterAccessError(NdpError):
    """A CXL.io register access answered SLVERR (or another error response)."""

    def __init__(self, offset: int, pasid: int, response: Any, write: bool = True) -> None:
        self.offset, self.pasid, self.response = offset, pasid, response
        kind = "write" if write else "read"
        super().__init__(f"register {kind} at offset {offset:#05x} with PASID {pasid!r} "
                         f"answered {response!r}")


class MemAccessError(NdpError):
    """A CXL.mem access answered SLVERR or DECERR."""

    def __init__(self, addr: int, length: int, pasid: int, response: Any, write: bool = True) -> None:
        self.addr, self.length, self.pasid, self.response = addr, length, pasid, response
        kind = "write" if write else "read"
        super().__init__(f"mem {kind} of {length!r} bytes at {addr:#x} with PASID {pasid!r} "
                         f"answered {response!r}")


class CompletionError(NdpError):
    """The device completed a descriptor with a status other than OK."""

    def __init__(self, status: int, queue: int | None, seq: int, descriptor: Any) -> None:
        self.status = Status(status)
        self.queue, self.seq, self.descriptor = queue, seq, descriptor
        super().__init__(f"queue {queue!r} seq {seq!r}: device answered {self.status.name} "
                         f"(status {int(self.status)}) for {descriptor!r}")


class DeviceTimeout(NdpError):
    """No completion arrived within the allowed number of device cycles."""

    def __init__(self, queue: int, seq: int, timeout_cycles: int, device: int | None = None) -> None:
        self.queue, self.seq, self.timeout_cycles = queue, seq, timeout_cycles
        self.device = device
        where = "" if device is None else f"device {device!r} "
        super().__init__(f"{where}queue {queue!r} seq {seq!r}: no completion after "
                         f"{timeout_cycles!r} device cycles")


class QueueFull(NdpError):
    """The slot the next descriptor needs still holds a completion nobody has waited for."""

    def __init__(self, queue: int, seq: int, blocking_seq: int) -> None:
        self.queue, self.seq, self.blocking_seq = queue, seq, blocking_seq
        super().__init__(f"queue {queue!r} is full: seq {seq!r} needs the slot of seq "
                         f"{blocking_seq!r}, whose completion has not been waited for")


class OutOfDeviceMemory(NdpError):
    """A data range (a queue's, or a pooled device's) has no room left for an allocation."""


class SimulationDeadlock(NdpError):
    """On simulated time (driver.clock): nothing is ready and no timer is scheduled, so no
    coroutine can ever make progress."""

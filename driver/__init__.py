"""Host driver of the NDP device (spec: shared/spec/read-compute.md).

    transport = CocotbAxiTransport(dut)          # driver.rtl_transport, in a cocotb test
    dev = await NdpDevice.open(transport)
    await dev.configure_queue(0, sq_base, cq_base, data_base, data_limit, log2_depth, log2_slot)
    w = await dev.upload(weights)                # K x N float16
    y = await dev.gemv(x, w)                     # (K,) float16 -> (N,) float16

The RTL transport is not imported here, so the driver imports without cocotb.
"""
from .errors import (ArgumentError, CompletionError, DeviceNotFound, DeviceTimeout,
                     MemAccessError, NdpError, OutOfDeviceMemory, QueueFull,
                     RegisterAccessError, ShapeError)
from .transport import Transport
from .queue import Completion, Queue
from .device import (Capabilities, DeviceTensor, NdpDevice, load_descriptor,
                     matmul_descriptor, store_descriptor)

__all__ = ["ArgumentError", "CompletionError", "DeviceNotFound", "DeviceTimeout",
           "MemAccessError", "NdpError", "OutOfDeviceMemory", "QueueFull",
           "RegisterAccessError", "ShapeError", "Transport", "Completion", "Queue",
           "Capabilities", "DeviceTensor", "NdpDevice", "load_descriptor",
           "matmul_descriptor", "store_descriptor"]

"""Host driver of the NDP device (spec: shared/spec/read-compute.md).

    transport = CocotbAxiTransport(dut)          # driver.rtl_transport, in a cocotb test
    dev = await NdpDevice.open(transport)
    await dev.configure_queue(0, sq_base, cq_base, data_base, data_limit, log2_depth, log2_slot)
    w = await dev.upload(weights)                # K x N float16
    y = await dev.gemv(x, w)                     # (K,) float16 -> (N,) float16

A pool of devices (driver.pool.DevicePool) on the model shares one simulated clock
(driver.clock), so work on several devices overlaps in simulated time:

    async def main():
        pool = await DevicePool.model(isa.load_config("default"), 2, log2_depth=2, log2_slot=16)
        ...
    driver.clock.run(main())

The RTL transport is not imported here, so the driver imports without cocotb. The operands
(DeviceTensor, LoraAdapter, KvBlock, PagedKvShare) and the descriptor encoders are isa's
(isa/encoders.py), as are NdpError and the argument errors (isa/errors.py).
"""
from .alloc import RangeAllocator
from .attention import (
                     attention_reference,
                     kv_operand_bytes,
                     kv_operand_lines,
                     kv_v_offset,
                     merge_attention,
                     partial_attention_reference,
                     query_groups,
                     scale_query,
                     split_tokens,
)
from .clock import SimClock, VirtualTimeLoop
from .device import Capabilities, NdpDevice
from .errors import (
                     CompletionError,
                     DeviceNotFound,
                     DeviceTimeout,
                     MemAccessError,
                     OutOfDeviceMemory,
                     QueueFull,
                     RegisterAccessError,
                     SimulationDeadlock,
)
from .kv_cache import PagedKvCache
from .pool import DevicePool, Ticket
from .queue import Completion, Queue
from .transport import Transport

__all__ = ["CompletionError", "DeviceNotFound", "DeviceTimeout", "MemAccessError", "OutOfDeviceMemory",
           "QueueFull", "RegisterAccessError", "SimulationDeadlock", "Transport", "Completion", "Queue",
           "Capabilities", "NdpDevice",
           "attention_reference", "kv_operand_bytes", "kv_operand_lines", "kv_v_offset",
           "merge_attention", "partial_attention_reference", "query_groups", "scale_query",
           "split_tokens", "RangeAllocator", "SimClock", "VirtualTimeLoop", "DevicePool", "Ticket",
           "PagedKvCache"]

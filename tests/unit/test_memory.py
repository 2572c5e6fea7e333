"""sim/memory.py: the model's DRAM faults, line by line, as the RTL benches inject them."""
import numpy as np
import pytest

from isa.axi import RESP_DECERR, RESP_OKAY, RESP_SLVERR
from sim.memory import DramFaults, SparseMemory


def test_a_fault_covers_the_lines_it_overlaps_and_the_worst_answer_wins():
    faults = DramFaults()
    assert not faults and faults.read_resp(0, 1 << 20) == RESP_OKAY
    faults.add(0x1010, 0x1050, read=RESP_SLVERR, write=RESP_OKAY)           # lines 0x1000 and 0x1040
    faults.add(0x1040, 0x1041, read=RESP_DECERR, write=RESP_DECERR)
    assert faults.read_resp(0x0FC0, 64) == RESP_OKAY and faults.read_resp(0x1080, 64) == RESP_OKAY
    assert faults.read_resp(0x1000, 64) == RESP_SLVERR
    assert faults.read_resp(0x1000, 128) == RESP_DECERR                # both lines: the worse answer
    assert faults.write_resp(0x1000, 64) == RESP_OKAY and faults.write_resp(0x1070, 1) == RESP_DECERR
    faults.clear()
    assert faults.read_resp(0x1040, 64) == RESP_OKAY


def test_a_device_write_keeps_the_faulty_lines_bytes():
    memory = SparseMemory(1 << 20)
    memory.write(0, bytes([1]) * 256)
    memory.faults.add(64, 128, read=RESP_OKAY, write=RESP_SLVERR)
    memory.device_write(32, bytes([9]) * 160)                    # lines 0 (half), 1, 2 (all)
    assert memory.read(0, 256) == bytes([1]) * 32 + bytes([9]) * 32 + bytes([1]) * 64 + bytes([9]) * 64 \
        + bytes([1]) * 64
    assert memory.faults.writable(0, b"") == []


@pytest.mark.parametrize("lo,hi,resp", [(64, 64, RESP_SLVERR), (-64, 0, RESP_SLVERR), (0, 64, 1), (0, 64, 7)])
def test_bad_fault_arguments_are_refused(lo, hi, resp):
    with pytest.raises(ValueError):
        DramFaults().add(lo, hi, read=resp)


@pytest.mark.parametrize("page_bytes", [1 << 12, 1 << 20])
def test_sparse_memory_against_a_bytearray(page_bytes):
    """Writes and reads across page boundaries, at the timing-only model's 4 KiB pages and
    the default MiB, equal a flat bytearray's; a page that is not a power of two is refused."""
    rng = np.random.default_rng(page_bytes)
    size = 3 << 20
    memory, flat = SparseMemory(size, page_bytes), bytearray(size)
    for _ in range(200):
        addr, n = int(rng.integers(0, size - 20000)), int(rng.integers(0, 20000))
        data = rng.bytes(n)
        memory.write(addr, data)
        flat[addr:addr + n] = data
        a, m = int(rng.integers(0, size - 20000)), int(rng.integers(0, 20000))
        assert memory.read(a, m) == bytes(flat[a:a + m])
    with pytest.raises(ValueError, match="power of two"):
        SparseMemory(size, 3000)

"""Device DRAM for the model: sparse, in 1 MiB pages, so a 512 GB device costs only
what is written; and the faults it may answer with."""
import numpy as np

from isa.axi import RESP_DECERR, RESP_OKAY, RESP_SLVERR

PAGE = 1 << 20
TIMING_PAGE = 1 << 12           # a timing-only model's (sim/device.py)
LINE = 64                       # the granule of a fault: a DRAM line (spec section 5's data width)
FAULT_RESPS = (RESP_OKAY, RESP_SLVERR, RESP_DECERR)    # what a line may answer (EXOKAY: exclusive accesses only)


class DramFaults:
    """Lines of DRAM that answer an error response: the memory-side faults a test injects
    (an uncorrectable ECC error answers SLVERR, an address no controller decodes DECERR).
    A read of a faulty line returns zeros with its response, a write to one is dropped,
    as cocotbext-axi's RAM model does when its memory raises; the RTL benches inject the
    same ranges into their DRAM models (rtlbench/env.py, rtlbench/fast)."""

    def __init__(self):
        self.ranges = []            # (lo, hi, read response, write response)

    def __bool__(self):
        return bool(self.ranges)

    def add(self, lo, hi, read=RESP_SLVERR, write=RESP_SLVERR):
        """Lines overlapping [lo, hi) answer `read` to reads and `write` to writes."""
        for name, resp in (("read", read), ("write", write)):
            if resp not in FAULT_RESPS:
                raise ValueError(f"{name} response must be one of {sorted(FAULT_RESPS)}, got {resp!r}")
        if not 0 <= lo < hi:
            raise ValueError(f"fault range [{lo!r}, {hi!r}) is empty or negative")
        self.ranges.append((lo - lo % LINE, -(-hi // LINE) * LINE, read, write))

    def clear(self):
        self.ranges = []

    def _resp(self, addr, length, which):
        worst = RESP_OKAY
        for lo, hi, *resps in self.ranges:
            if addr < hi and lo < addr + max(length, 1):
                worst = max(worst, resps[which])
        return worst

    def read_resp(self, addr, length):
        """The worst response of the lines a read of [addr, addr + length) touches."""
        return self._resp(addr, length, 0)

    def write_resp(self, addr, length):
        return self._resp(addr, length, 1)

    def writable(self, addr, data):
        """The parts of a write of `data` at `addr` outside the write-faulty lines."""
        data = bytes(data)
        if not self.ranges:
            return [(addr, data)]
        parts, first = [], addr - addr % LINE
        for line in range(first, addr + len(data), LINE):
            lo, hi = max(addr, line), min(addr + len(data), line + LINE)
            if self.write_resp(line, LINE) == RESP_OKAY:
                if parts and parts[-1][0] + len(parts[-1][1]) == lo:
                    parts[-1] = (parts[-1][0], parts[-1][1] + data[lo - addr:hi - addr])
                else:
                    parts.append((lo, data[lo - addr:hi - addr]))
        return parts


class SparseMemory:
    def __init__(self, size, page_bytes=PAGE):
        """`page_bytes`: the unit host memory is allocated in (a power of two); small pages
        for a memory that holds a few scattered bytes, such as a timing-only model's page
        lists over a whole KV cache's address space."""
        if page_bytes < 1 or page_bytes & (page_bytes - 1):
            raise ValueError(f"page_bytes must be a power of two, got {page_bytes!r}")
        self.size, self.page = size, page_bytes
        self._pages = {}
        self._versions = {}             # page -> number of writes to it
        self.faults = DramFaults()

    def versions(self, addr, length):
        """A token that changes whenever [addr, addr + length) may have been written."""
        first, last = addr // self.page, (addr + max(length, 1) - 1) // self.page
        return tuple(self._versions.get(page, 0) for page in range(first, last + 1))

    def _check(self, addr, length):
        if addr < 0 or length < 0 or addr + length > self.size:
            raise ValueError(f"access [{addr:#x}, {addr + length:#x}) outside the {self.size:#x}-byte DRAM")

    def write(self, addr, data):
        data = np.frombuffer(bytes(data), np.uint8)
        self._check(addr, len(data))
        done = 0
        while done < len(data):
            page, offset = divmod(addr + done, self.page)
            n = min(self.page - offset, len(data) - done)
            if page not in self._pages:
                self._pages[page] = np.zeros(self.page, np.uint8)
            self._pages[page][offset:offset + n] = data[done:done + n]
            self._versions[page] = self._versions.get(page, 0) + 1
            done += n

    def read(self, addr, length):
        return self.array(addr, length).tobytes()

    def device_write(self, addr, data):
        """A write by the device: the lines that answer an error keep their bytes."""
        if not self.faults:             # every descriptor's writes pass here: no copy then
            self.write(addr, data)
            return
        for part_addr, part in self.faults.writable(addr, data):
            self.write(part_addr, part)

    def array(self, addr, length):
        """The bytes at [addr, addr + length) as a numpy uint8 array: a read-only view when
        they lie in one written page, else a copy."""
        self._check(addr, length)
        page, offset = divmod(addr, self.page)
        if offset + length <= self.page and page in self._pages:
            view = self._pages[page][offset:offset + length]
            view.flags.writeable = False
            return view
        out = np.zeros(length, np.uint8)
        done = 0
        while done < length:
            page, offset = divmod(addr + done, self.page)
            n = min(self.page - offset, length - done)
            if page in self._pages:
                out[done:done + n] = self._pages[page][offset:offset + n]
            done += n
        return out

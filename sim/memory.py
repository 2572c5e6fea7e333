"""Device DRAM for the model: sparse, in 1 MiB pages, so a 512 GB device costs only
what is written."""
import numpy as np

PAGE = 1 << 20


class SparseMemory:
    def __init__(self, size):
        self.size = size
        self._pages = {}

    def _check(self, addr, length):
        if addr < 0 or length < 0 or addr + length > self.size:
            raise ValueError(f"access [{addr:#x}, {addr + length:#x}) outside the {self.size:#x}-byte DRAM")

    def write(self, addr, data):
        data = np.frombuffer(bytes(data), np.uint8)
        self._check(addr, len(data))
        done = 0
        while done < len(data):
            page, offset = divmod(addr + done, PAGE)
            n = min(PAGE - offset, len(data) - done)
            if page not in self._pages:
                self._pages[page] = np.zeros(PAGE, np.uint8)
            self._pages[page][offset:offset + n] = data[done:done + n]
            done += n

    def read(self, addr, length):
        self._check(addr, length)
        out = np.zeros(length, np.uint8)
        done = 0
        while done < length:
            page, offset = divmod(addr + done, PAGE)
            n = min(PAGE - offset, length - done)
            if page in self._pages:
                out[done:done + n] = self._pages[page][offset:offset + n]
            done += n
        return out.tobytes()

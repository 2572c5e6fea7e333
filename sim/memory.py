"""Device DRAM for the model: sparse, in 1 MiB pages, so a 512 GB device costs only
what is written."""
import numpy as np

PAGE = 1 << 20


class SparseMemory:
    def __init__(self, size):
        self.size = size
        self._pages = {}
        self._versions = {}             # page -> number of writes to it

    def versions(self, addr, length):
        """A token that changes whenever [addr, addr + length) may have been written."""
        first, last = addr // PAGE, (addr + max(length, 1) - 1) // PAGE
        return tuple(self._versions.get(page, 0) for page in range(first, last + 1))

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
            self._versions[page] = self._versions.get(page, 0) + 1
            done += n

    def read(self, addr, length):
        return self.array(addr, length).tobytes()

    def array(self, addr, length):
        """The bytes at [addr, addr + length) as a numpy uint8 array: a read-only view when
        they lie in one written page, else a copy."""
        self._check(addr, length)
        page, offset = divmod(addr, PAGE)
        if offset + length <= PAGE and page in self._pages:
            view = self._pages[page][offset:offset + length]
            view.flags.writeable = False
            return view
        out = np.zeros(length, np.uint8)
        done = 0
        while done < length:
            page, offset = divmod(addr + done, PAGE)
            n = min(PAGE - offset, length - done)
            if page in self._pages:
                out[done:done + n] = self._pages[page][offset:offset + n]
            done += n
        return out

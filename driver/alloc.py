"""Placement of tensors in a device's data range: first fit, per tensor, with free."""
import bisect

from isa.errors import ArgumentError, count_arg
from isa.slots import LINE_BYTES

from .errors import OutOfDeviceMemory


class RangeAllocator:
    """First-fit allocation of `align`-aligned ranges in [base, limit).

    Each allocation is rounded up to a multiple of `align`, so every free extent starts
    aligned; freeing merges an extent with its free neighbours, so a range freed piece by
    piece can be allocated again whole. `name` prefixes the error messages.
    """

    def __init__(self, base: int, limit: int, align: int = LINE_BYTES, name: str | None = None) -> None:
        self.base = count_arg(base, "base")
        self.limit = count_arg(limit, "limit")
        self.align = count_arg(align, "align", 1)
        if self.align & (self.align - 1):
            raise ArgumentError(f"align must be a power of two, got {align!r}")
        if self.base % self.align:
            raise ArgumentError(f"base {self.base:#x} is not {self.align!r}-byte aligned")
        if self.limit < self.base:
            raise ArgumentError(f"limit {self.limit:#x} is below base {self.base:#x}")
        self.name = name
        self.free_all()

    def __repr__(self) -> str:
        return (f"RangeAllocator({self.base:#x}, {self.limit:#x}, align={self.align!r}, "
                f"used_bytes={self.used_bytes!r})")

    def free_all(self) -> None:
        """Forget every allocation: the whole range is free again."""
        self._starts = [self.base] if self.limit > self.base else []    # free extents, sorted
        self._ends = [self.limit] if self.limit > self.base else []
        self._sizes: dict[int, int] = {}                               # addr -> bytes taken

    # ---- queries ---------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return sum(self._sizes.values())

    @property
    def free_bytes(self) -> int:
        return self.limit - self.base - self.used_bytes

    @property
    def largest_free(self) -> int:
        """Bytes of the largest extent one allocation could take."""
        return max((self._usable(i) for i in range(len(self._starts))), default=0)

    def _usable(self, i: int) -> int:
        # the last extent may end unaligned at `limit`; an allocation takes whole units
        return (self._ends[i] - self._starts[i]) // self.align * self.align

    def size_of(self, addr: int) -> int | None:
        """Bytes taken by the allocation at `addr` (rounded up to `align`), None if none."""
        return self._sizes.get(addr)

    # ---- changes ---------------------------------------------------------------------------

    def allocate(self, nbytes: int, align: int | None = None) -> int:
        """The lowest address, a multiple of `align` (default and at least the allocator's
        own), of a free range of `nbytes`; OutOfDeviceMemory if none. A larger alignment
        leaves the free bytes below the range free."""
        nbytes = count_arg(nbytes, "nbytes", 1)
        size = -(-nbytes // self.align) * self.align
        boundary = self.align if align is None else count_arg(align, "align", 1)
        if boundary & (boundary - 1):
            raise ArgumentError(f"align must be a power of two, got {align!r}")
        boundary = max(boundary, self.align)
        for i in range(len(self._starts)):
            start = -(-self._starts[i] // boundary) * boundary
            if start + size > self._ends[i]:
                continue
            end = self._ends[i]
            if start == self._starts[i]:
                del self._starts[i], self._ends[i]
            else:
                self._ends[i] = start                   # the bytes below stay free
                i += 1
            if end > start + size:
                self._starts.insert(i, start + size)
                self._ends.insert(i, end)
            self._sizes[start] = size
            return start
        where = f"{self.name}: " if self.name else ""
        aligned = "" if align is None else f" at a multiple of {boundary!r}"
        raise OutOfDeviceMemory(
            f"{where}{nbytes!r} bytes do not fit{aligned}: {self.free_bytes!r} bytes are free, the largest "
            f"free extent is {self.largest_free!r} bytes, in the range [{self.base:#x}, {self.limit:#x})")

    def free(self, addr: int) -> None:
        """Give back the allocation that starts at `addr`."""
        size = self._sizes.pop(addr, None)
        if size is None:
            where = f"{self.name}: " if self.name else ""
            shown = f"{addr:#x}" if isinstance(addr, int) else repr(addr)
            raise ArgumentError(f"{where}address {shown} is not allocated")
        end = addr + size
        i = bisect.bisect(self._starts, addr)
        if i < len(self._starts) and self._starts[i] == end:        # merge with the next
            end = self._ends[i]
            del self._starts[i], self._ends[i]
        if i and self._ends[i - 1] == addr:                         # merge with the previous
            self._ends[i - 1] = end
        else:
            self._starts.insert(i, addr)
            self._ends.insert(i, end)

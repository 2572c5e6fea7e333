"""A request-head share's KV in pages, placed by hand for the benches (the stream, the
scenarios, the roofline): each page at a 4 KiB boundary, last page lowest (so the list is
not in address order), its keys (token-major) then its values half a page on; the list at
a 512-byte boundary (docs/read-compute-project.md, paged ATTENTION)."""
import struct

from isa import Descriptor, DescType, Dtype, Op
from isa.descriptor import PAGE_ALIGN, PAGE_ENTRY_BYTES, page_flags
from isa.validate import PAGE_LIST_BYTES, lines

U64 = struct.Struct("<Q")


def align_up(addr, to):
    return -(-addr // to) * to


async def place_pages(dev, queue, k, v, shift, spoil=None):
    """Write K and V (T x d float16) as pages of 2^shift tokens into the queue's data range
    and their list; `spoil` (index, address) replaces an entry. Returns (list address,
    the entries as placed)."""
    tokens, d = 1 << shift, k.shape[1]
    half = tokens * d * 2
    count = -(-k.shape[0] // tokens)
    entries = [0] * count
    for p in reversed(range(count)):
        addr = align_up(queue.allocate(2 * half + PAGE_ALIGN), PAGE_ALIGN)
        await dev.transport.mem_write(addr, k[p * tokens:(p + 1) * tokens].tobytes(), queue.pasid)
        await dev.transport.mem_write(addr + half, v[p * tokens:(p + 1) * tokens].tobytes(), queue.pasid)
        entries[p] = addr
    placed = list(entries)
    if spoil is not None:
        entries[spoil[0]] = spoil[1]
    list_addr = align_up(queue.allocate(count * PAGE_ENTRY_BYTES + PAGE_LIST_BYTES), PAGE_LIST_BYTES)
    await dev.transport.mem_write(list_addr, b"".join(U64.pack(a) for a in entries), queue.pasid)
    return list_addr, placed


def paged_descriptor(list_addr, tokens, d, shift, m):
    """A paged ATTENTION of `m` query rows over `tokens` tokens of d in pages of 2^shift."""
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16, flags=page_flags(shift),
                      dev_addr=list_addr, dev_size=lines(-(-tokens // (1 << shift)) * PAGE_ENTRY_BYTES),
                      dev_rows=tokens, dev_cols=d, in_size=lines(m * d * 2), in_rows=m, in_cols=d)

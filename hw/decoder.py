"""The decoder: the status a descriptor earns and the sizes the control unit needs.

Three stages (isa/microarch.py DECODE_STAGES), its inputs held for all three: the first
registers the products (the elements of each operand and of the result: 20 x 20-bit
multiplies), the operand's end, a slot's room and a paged list's pages and page size; the
second the lines they take, the result's bytes and whether the operand is in bounds; the third compares them against the
fields and the queue's registers, and `decoded` is valid in it (combinational from the
registers: the front end registers it). The rules and their order are
`isa/validate.py`'s, which the unit test checks this block against: BAD_OP, then
BAD_DTYPE, then BOUNDS, then BAD_SHAPE.
"""
from amaranth import Module, Signal, Mux
from amaranth.lib import wiring, data
from amaranth.lib.wiring import In, Out

from isa import Status, DescType, Op, Dtype, FIELDS
from isa.descriptor import FLAG_FIELDS, Flag, PAGE_ALIGN, PAGE_SHIFT_BITS, PAGE_SHIFT_MASK
from isa.microarch import PAGE_LIST_MAX
from isa.slots import HEADER_BYTES, LINE_BYTES
from isa.validate import PAGE_LIST_BYTES
from .stage_sizes import StageSizes, stage_sizes_layout

STAGES = 2                  # weight stages of a descriptor at most (the chains)

# the flags as their own fields (isa/descriptor.py FLAG_FIELDS): d.flags.trans_w, .page_shift
FlagsLayout = data.StructLayout({name: width for name, _, width in FLAG_FIELDS})
DescriptorLayout = data.StructLayout({name: FlagsLayout if name == "flags" else width for name, _, width in FIELDS})



def decoded_layout(cfg):
    """What the front end hands the control unit with a descriptor: decoded once."""
    return data.StructLayout({
        "status": 8,
        "is_load": 1, "is_store": 1, "is_compute": 1,
        # where the second device operand (ATTENTION's and LORA_XAB's) starts: the line after
        # the first; where the anchor lines start in the result
        "second_addr": 64, "stats_offset": 48,
        # a paged ATTENTION (isa/validate.py paged): its pages, log2 of a page's tokens and
        # the bytes of a page's keys (its values follow them)
        "paged": 1, "pages": range(PAGE_LIST_MAX + 1), "page_shift": PAGE_SHIFT_BITS, "page_half": 40,
        # its stages' sizes (hw/stage_sizes.py): the first product's, the second's
        "stages": data.ArrayLayout(stage_sizes_layout(cfg.lanes), STAGES),
    })


class Decoder(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "desc": In(DescriptorLayout),
            "log2_slot": In(8), "data_base": In(64), "data_limit": In(64),
            "decoded": Out(decoded_layout(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        d, cfg, out = self.desc, self._cfg, self.decoded
        line_log2 = (LINE_BYTES - 1).bit_length()

        def lines(nbytes):
            return (nbytes + LINE_BYTES - 1) >> line_log2

        is_rw = (d.type == DescType.LOAD) | (d.type == DescType.STORE)
        is_compute = d.type == DescType.READ_COMPUTE
        m.d.comb += [out.is_load.eq(d.type == DescType.LOAD), out.is_store.eq(d.type == DescType.STORE),
                     out.is_compute.eq(is_compute)]

        is_softmax = is_compute & (d.op == Op.SOFTMAX)
        chained = is_compute & ((d.op == Op.ATTENTION) | (d.op == Op.LORA_XAB))
        trans = d.flags.trans_w               # TRANS_W (isa/validate.py stages)
        plain = is_compute & ((d.op == Op.GEMV) | (d.op == Op.GEMM) | (d.op == Op.ATTENTION))
        paged = is_compute & (d.op == Op.ATTENTION) & d.flags.paged
        paged_bits = int(Flag.TRANS_W | Flag.PAGED) | PAGE_SHIFT_MASK
        flags = d.flags.as_value()
        implemented = (((flags == 0) & ((is_rw & (d.op == 0)) | chained))
                       | (plain & ((flags & ~int(Flag.TRANS_W)) == 0))
                       | (paged & trans & ((flags & ~paged_bits) == 0))
                       | (is_softmax & ((flags & ~int(Flag.PARTIAL)) == 0)))
        dtype_ok = Mux(is_compute, d.dtype == Dtype.FP16,
                       (d.dtype == Dtype.FP16) | (d.dtype == Dtype.BF16) | (d.dtype == Dtype.INT8))

        # registered in stage 1: the operand's end, the products, a slot's room, a list's pages
        # and page size; in stage 2: their lines, the result's bytes
        dev_end = Signal(66)
        m.d.sync += dev_end.eq(d.dev_addr + (d.dev_size << line_log2))
        # a paged ATTENTION's list starts at a multiple of PAGE_LIST_BYTES
        list_log2 = (PAGE_LIST_BYTES - 1).bit_length()
        # registered in stage 2: the queue's range reaches here through the front end's
        # choice of queue, and the status through its hand-over
        in_bounds = Signal()
        m.d.sync += in_bounds.eq(Mux(paged, d.dev_addr[:list_log2] == 0, d.dev_addr[:line_log2] == 0) & (
            (d.dev_size == 0) | ((d.dev_addr >= self.data_base) & (dev_end <= self.data_limit))))

        # element size 1 (INT8) or 2 bytes: a left shift by el_log2
        el_log2 = Mux(d.dtype == Dtype.INT8, 0, 1)
        # the products (isa/validate.py stages): the first's K and N as stored, the
        # second's swapped; the result rows hold the last product's N values (stage 1)
        k0, n0 = Mux(trans, d.dev_cols, d.dev_rows), Mux(trans, d.dev_rows, d.dev_cols)
        out_cols = Mux(chained, k0, n0)
        in_elems, dev_elems, out_elems = Signal(40), Signal(40), Signal(40)
        m.d.sync += [in_elems.eq(d.in_rows * d.in_cols), dev_elems.eq(d.dev_rows * d.dev_cols),
                     out_elems.eq(d.in_rows * out_cols)]
        # result bytes (isa/validate.py result_bytes): values, then one line of anchors per row
        in_lines, dev_lines, o_lines = Signal(40), Signal(40), Signal(44)
        m.d.sync += [in_lines.eq(lines(in_elems << el_log2)), dev_lines.eq(lines(dev_elems << el_log2)),
                     o_lines.eq(lines(out_elems << 2))]
        second_addr = Signal(64)
        m.d.sync += second_addr.eq(d.dev_addr + (lines(dev_elems << el_log2) << line_log2))
        m.d.comb += [out.second_addr.eq(second_addr),
                     out.stats_offset.eq(Mux(d.op == Op.ATTENTION, o_lines, in_lines) << line_log2)]
        # the result's bytes from the stage-1 products directly: lines() is a ceiling
        # division by a line, ceil(x / L) + r = floor((x + L - 1 + r L) / L)
        result = Signal(50)
        line_elems16, line_elems32 = LINE_BYTES // 2, LINE_BYTES // 4
        with m.If(is_softmax):
            partial_bytes = ((in_elems + line_elems16 - 1 + d.in_rows * line_elems16) >> (line_log2 - 1)) << line_log2
            m.d.sync += result.eq(Mux(d.flags.partial, partial_bytes, in_elems << 1))
        with m.Elif(d.op == Op.ATTENTION):
            m.d.sync += result.eq(((out_elems + line_elems32 - 1 + d.in_rows * line_elems32) >> (line_log2 - 2))
                                  << line_log2)
        with m.Else():
            m.d.sync += result.eq(out_elems << 1)
        # payload room of a slot; served queues have log2_slot <= 48 (hw/queue_geometry.py)
        room = Signal(50)
        m.d.sync += room.eq((1 << self.log2_slot[:6]) - HEADER_BYTES)

        # a paged ATTENTION's pages (T over 2^shift tokens a page) and its list's lines
        shift = d.flags.page_shift
        pages, half = Signal(21), Signal(40)
        m.d.sync += [pages.eq((d.dev_rows + (1 << shift) - 1) >> shift), half.eq(d.dev_cols << (shift + 1))]
        m.d.comb += [out.paged.eq(paged), out.pages.eq(pages), out.page_shift.eq(shift), out.page_half.eq(half)]
        list_lines = (pages + (LINE_BYTES // 8 - 1)) >> (LINE_BYTES // 8 - 1).bit_length()
        paged_ok = (pages <= PAGE_LIST_MAX) & (half[:(PAGE_ALIGN - 1).bit_length()] == 0)
        sizes_ok = ((d.in_size == in_lines)
                    & (d.dev_size == Mux(paged, list_lines, Mux(chained, dev_lines << 1, dev_lines)))
                    & (d.dev_rows != 0) & (d.dev_cols != 0) & (~paged | paged_ok))
        load_ok = (d.dev_size << line_log2) <= room
        store_ok = ((d.in_rows != 0) & (d.in_cols != 0) & (d.in_size == d.dev_size)
                    & ((d.in_size << line_log2) <= room))
        # the second product of a chain: K = the first's N, from the input buffer
        second_ok = ~chained | ((n0 <= cfg.k_max) & (k0 <= cfg.n_max))
        compute_ok = ((d.in_rows != 0) & (d.in_cols == k0) & ((d.op != Op.GEMV) | (d.in_rows == 1))
                      & (k0 <= cfg.k_max) & (n0 <= cfg.n_max) & second_ok
                      & ((d.in_size << line_log2) <= room) & (result <= room))
        softmax_ok = ((d.dev_addr == 0) & (d.dev_size == 0) & (d.dev_rows == 0) & (d.dev_cols == 0)
                      & (d.in_rows != 0) & (d.in_cols != 0) & (d.in_cols <= cfg.k_max)
                      & (d.in_size == in_lines) & ((d.in_size << line_log2) <= room) & (result <= room))
        shape_ok = Mux(is_softmax, softmax_ok,
                       sizes_ok & Mux(d.type == DescType.LOAD, load_ok,
                                      Mux(d.type == DescType.STORE, store_ok, compute_ok)))

        # the stages' sizes: the first product's K x N as stored, the second's swapped
        for i in range(STAGES):
            m.submodules[f"stage{i}"] = sizes = StageSizes(cfg)
            m.d.comb += [sizes.k.eq(k0 if i == 0 else n0), sizes.n.eq(n0 if i == 0 else k0),
                         sizes.trans.eq(trans if i == 0 else 0), sizes.page_shift.eq(shift),
                         out.stages[i].eq(sizes.sizes)]

        with m.If(~implemented):
            m.d.comb += out.status.eq(Status.BAD_OP)
        with m.Elif(~dtype_ok):
            m.d.comb += out.status.eq(Status.BAD_DTYPE)
        with m.Elif(~in_bounds):
            m.d.comb += out.status.eq(Status.BOUNDS)
        with m.Elif(~shape_ok):
            m.d.comb += out.status.eq(Status.BAD_SHAPE)
        with m.Else():
            m.d.comb += out.status.eq(Status.OK)
        return m

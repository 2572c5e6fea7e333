"""hw/decoder.py against isa/validate.py, the reference of the decode rules."""
from amaranth.sim import Simulator
from hypothesis import given, settings, strategies as st, HealthCheck

import isa
from isa.descriptor import Flag, page_flags
from isa import Descriptor, Status, DescType, Op, Dtype, FIELDS
from isa.microarch import DECODE_STAGES
from isa.validate import QueueView, lines
from hw.decoder import Decoder

CFG = isa.load_config("default")


def decode_all(cases):
    """Run (descriptor, queue) pairs through one simulation of the decoder: each held for
    its DECODE_STAGES stages (hw/decoder.py), the status read in the last."""
    dut = Decoder(CFG)
    out = []

    async def bench(ctx):
        for desc, queue in cases:
            ctx.set(dut.desc.as_value(), desc.to_int())
            ctx.set(dut.log2_slot, queue.log2_slot)
            ctx.set(dut.data_base, queue.data_base)
            ctx.set(dut.data_limit, queue.data_limit)
            await ctx.tick().repeat(DECODE_STAGES - 1)
            out.append(Status(ctx.get(dut.decoded.status)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


QUEUE = QueueView(log2_slot=16, data_base=0x10000, data_limit=0x90000)


def good_gemm(m=3, k=40, n=24, addr=0x10000, op=Op.GEMM):
    return Descriptor(type=DescType.READ_COMPUTE, op=op, dtype=Dtype.FP16, dev_addr=addr,
                      dev_size=lines(k * n * 2), dev_rows=k, dev_cols=n,
                      in_size=lines(m * k * 2), in_rows=m, in_cols=k)


def good_pair(op, m=3, d=40, t=24, addr=0x10000):
    """ATTENTION (K^T d x t, then V) or LORA_XAB (A d x t, then B) over two line-aligned halves."""
    return Descriptor(type=DescType.READ_COMPUTE, op=op, dtype=Dtype.FP16, dev_addr=addr,
                      dev_size=2 * lines(d * t * 2), dev_rows=d, dev_cols=t,
                      in_size=lines(m * d * 2), in_rows=m, in_cols=d)


def good_softmax(m=3, n=40, partial=False):
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.SOFTMAX, dtype=Dtype.FP16,
                      flags=Flag.PARTIAL if partial else 0, in_size=lines(m * n * 2), in_rows=m, in_cols=n)


def good_paged(m=2, d=64, t=100, shift=6, addr=0x10200):
    """A paged ATTENTION: T tokens in pages of 2^shift, the list at `addr` (a line a
    8 pages), keys of a page 2^shift x d x 2 bytes (a multiple of 4 KiB)."""
    pages = -(-t // (1 << shift))
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16, flags=page_flags(shift),
                      dev_addr=addr, dev_size=lines(pages * 8), dev_rows=t, dev_cols=d,
                      in_size=lines(m * d * 2), in_rows=m, in_cols=d)


def field_boundaries():
    """Every field at 0, 1, its maximum and maximum - 1, on otherwise good descriptors of
    each read-compute op."""
    trans_attention = Descriptor(**{**good_pair(Op.ATTENTION, d=24, t=40).__dict__, "flags": Flag.TRANS_W,
                                    "in_cols": 40, "in_size": lines(3 * 40 * 2)})
    for base in (good_gemm(), good_pair(Op.ATTENTION), good_pair(Op.LORA_XAB), good_softmax(partial=True),
                 trans_attention, good_paged()):
        for name, _, width in FIELDS:
            for value in {0, 1, 2, (1 << width) - 1, (1 << width) - 2}:
                yield Descriptor(**{**base.__dict__, name: value})


def status_cases():
    """At least one descriptor for each status, built from the rules' text, not the code."""
    q = QUEUE
    yield good_gemm(), Status.OK
    yield good_gemm(m=1, op=Op.GEMV), Status.OK
    yield Descriptor(type=DescType.RESERVED), Status.BAD_OP
    yield Descriptor(**{**good_gemm().__dict__, "op": 7}), Status.BAD_OP
    yield Descriptor(**{**good_gemm().__dict__, "flags": 0b100}), Status.BAD_OP
    # TRANS_W: the device matrix stored N x K (dev_rows = N, dev_cols = K = in_cols)
    trans = Descriptor(**{**good_gemm(k=24, n=40).__dict__, "flags": Flag.TRANS_W, "in_cols": 40,
                          "in_size": lines(3 * 40 * 2)})
    yield trans, Status.OK
    yield Descriptor(**{**trans.__dict__, "in_cols": 24, "in_size": lines(3 * 24 * 2)}), Status.BAD_SHAPE
    yield Descriptor(**{**trans.__dict__, "flags": Flag.TRANS_W | Flag.PARTIAL}), Status.BAD_OP
    yield Descriptor(**{**good_gemm(k=1, n=CFG.k_max + 1).__dict__, "flags": Flag.TRANS_W,
                        "in_cols": CFG.k_max + 1, "in_size": lines(3 * (CFG.k_max + 1) * 2)}), Status.BAD_SHAPE
    yield Descriptor(**{**good_gemm().__dict__, "dtype": Dtype.BF16}), Status.BAD_DTYPE
    yield good_gemm(addr=0x10040 - 0x20), Status.BOUNDS
    yield good_gemm(addr=q.data_limit - 64), Status.BOUNDS
    yield good_gemm(addr=q.data_base - 64), Status.BOUNDS
    yield good_gemm(m=2, op=Op.GEMV), Status.BAD_SHAPE
    yield Descriptor(**{**good_gemm().__dict__, "in_cols": 41, "in_size": lines(3 * 41 * 2)}), Status.BAD_SHAPE
    yield good_gemm(k=CFG.k_max + 1, n=1), Status.BAD_SHAPE
    yield good_gemm(n=CFG.n_max + 32, k=1), Status.BAD_SHAPE
    yield good_gemm(m=600, k=64, n=64), Status.BAD_SHAPE          # input larger than the slot
    yield Descriptor(**{**good_gemm().__dict__, "dev_size": 1}), Status.BAD_SHAPE
    # the project's ops
    for op in (Op.ATTENTION, Op.LORA_XAB):
        yield good_pair(op), Status.OK
        yield good_pair(op, m=CFG.rows + 3), Status.OK
        yield Descriptor(**{**good_pair(op).__dict__, "flags": Flag.PARTIAL}), Status.BAD_OP
        # attention's keys token-major (T x d, like V): dev_rows = T, dev_cols = d = in_cols
        yield (Descriptor(**{**good_pair(op, d=24, t=40).__dict__, "flags": Flag.TRANS_W, "in_cols": 40,
                             "in_size": lines(3 * 40 * 2)}),
               Status.OK if op == Op.ATTENTION else Status.BAD_OP)
        yield Descriptor(**{**good_pair(op).__dict__, "dtype": Dtype.INT8}), Status.BAD_DTYPE
        yield good_pair(op, addr=q.data_limit - 2 * lines(40 * 24 * 2) * 64 + 64), Status.BOUNDS
        yield Descriptor(**{**good_pair(op).__dict__, "dev_size": lines(40 * 24 * 2)}), Status.BAD_SHAPE
        yield good_pair(op, d=1, t=CFG.n_max + 1), Status.BAD_SHAPE
        yield Descriptor(**{**good_pair(op).__dict__, "in_cols": 24, "in_size": lines(3 * 24 * 2)}), Status.BAD_SHAPE
    # paged ATTENTION (docs/read-compute-project.md): TRANS_W required, the list at 512 bytes,
    # at most 64 pages, a page's keys whole 4 KiB
    yield good_paged(), Status.OK
    yield good_paged(t=1), Status.OK
    yield good_paged(t=64 * 64, d=32), Status.OK                          # 64 pages
    yield good_paged(t=64 * 64 + 1, d=32), Status.BAD_SHAPE               # 65 pages
    yield good_paged(shift=5), Status.OK                                  # 32 x 64 x 2 = 4 KiB
    yield good_paged(shift=4), Status.BAD_SHAPE                           # 2 KiB
    yield good_paged(d=48, shift=6), Status.BAD_SHAPE                     # 6 KiB
    yield good_paged(d=128, shift=4), Status.OK
    yield Descriptor(**{**good_paged().__dict__, "flags": Flag.PAGED | (6 << 3)}), Status.BAD_OP
    yield Descriptor(**{**good_paged().__dict__, "flags": Flag.TRANS_W | (6 << 3)}), Status.BAD_OP
    yield Descriptor(**{**good_paged().__dict__, "flags": page_flags(6) | Flag.PARTIAL}), Status.BAD_OP
    yield Descriptor(**{**good_paged().__dict__, "op": Op.GEMM}), Status.BAD_OP
    yield Descriptor(**{**good_paged().__dict__, "op": Op.LORA_XAB}), Status.BAD_OP
    yield good_paged(addr=0x10040), Status.BOUNDS                         # a line, not 512 bytes
    yield good_paged(addr=q.data_limit), Status.BOUNDS
    yield Descriptor(**{**good_paged().__dict__, "dev_size": 2}), Status.BAD_SHAPE
    yield Descriptor(**{**good_paged().__dict__, "in_cols": 32, "in_size": lines(2 * 32 * 2)}), Status.BAD_SHAPE
    yield good_softmax(), Status.OK
    yield good_softmax(partial=True), Status.OK
    yield good_softmax(n=CFG.k_max), Status.OK
    yield Descriptor(**{**good_softmax().__dict__, "flags": 0b101}), Status.BAD_OP
    yield Descriptor(**{**good_softmax().__dict__, "flags": Flag.TRANS_W}), Status.BAD_OP
    yield Descriptor(**{**good_softmax().__dict__, "dtype": Dtype.BF16}), Status.BAD_DTYPE
    yield Descriptor(**{**good_softmax().__dict__, "dev_addr": 0x40}), Status.BAD_SHAPE
    yield Descriptor(**{**good_softmax().__dict__, "dev_addr": 0x20}), Status.BOUNDS
    yield Descriptor(**{**good_softmax().__dict__, "dev_cols": 1}), Status.BAD_SHAPE
    yield good_softmax(n=CFG.k_max + 1), Status.BAD_SHAPE
    yield good_softmax(m=0), Status.BAD_SHAPE


def test_decoder_status_cases():
    cases = list(status_cases())
    got = decode_all([(d, QUEUE) for d, _ in cases])
    for (desc, expected), status in zip(cases, got):
        assert isa.check_descriptor(desc, QUEUE, CFG) == expected, desc
        assert status == expected, desc


def test_decoder_field_boundaries():
    cases = [(d, QUEUE) for d in field_boundaries()]
    got = decode_all(cases)
    for (desc, queue), status in zip(cases, got):
        assert status == isa.check_descriptor(desc, queue, CFG), desc


small = st.integers(0, 70)
descriptors = st.builds(
    Descriptor, type=st.integers(0, 3), op=st.sampled_from([0, 0, 1, 1, 2, 3, 9]),
    dtype=st.sampled_from([0, 0, 0, 1, 2, 5]),
    flags=st.sampled_from([0, 0, 0, 1, 0x200, page_flags(0), page_flags(1), page_flags(6), 0x4]),
    dev_addr=st.integers(0, 0xA0000).map(lambda a: a & ~0x3F if a % 3 else a),
    dev_size=small, dev_rows=small, dev_cols=small, in_size=small, in_rows=small, in_cols=small)
queues = st.builds(QueueView, log2_slot=st.integers(6, 14), data_base=st.integers(0, 0x20000),
                   data_limit=st.integers(0, 0xA0000))


def consistent(d):
    """Make the sizes agree with the dims, so the random cases reach the later checks too."""
    el = isa.dtype_bytes(d.dtype) or 2
    d = Descriptor(**{**d.__dict__, "dev_size": lines(d.dev_rows * d.dev_cols * el),
                      "in_size": lines(d.in_rows * d.in_cols * el)})
    if isa.validate.paged(d):
        d = Descriptor(**{**d.__dict__, "dev_size": isa.validate.operand_lines(d), "dev_addr": d.dev_addr & ~0x1FF})
    return d


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(descriptors, queues, st.booleans()), min_size=20, max_size=40))
def test_decoder_matches_rules(batch):
    cases = [(consistent(d) if fix else d, q) for d, q, fix in batch]
    got = decode_all(cases)
    for (desc, queue), status in zip(cases, got):
        assert status == isa.check_descriptor(desc, queue, CFG), (desc, queue)

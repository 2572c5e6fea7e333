"""The front end's run fetcher (hw/front_end.py) against the model (sim/control_unit.py,
which fetches as hw/front_end.py does): the reader runs each descriptor makes, in order,
with their addresses and lines; the first one DECODE_STAGES + 2 cycles after the pop
(DECODE, CHECK, READY and the move to slot 1, then the fetch); none for a descriptor that
failed; the hand-over the cycle after the move; the hazard rule: after a STORE, nothing
is fetched until the STORE's report; and the next descriptor's list read among this
one's runs, at a run that begins a stage."""
import dataclasses

import pytest

import isa
from ties import simulate
from isa import Descriptor, DescType, Dtype, Op, Status
from isa.descriptor import Flag, page_flags
from isa.microarch import DECODE_STAGES
from isa.slots import LINE_BYTES
from isa.validate import lines
from sim.control_unit import ControlUnit, State
from sim.decoder import decode
from sim.instruction_buffer import Entry
from sim.memory import SparseMemory
from sim.regfile import QueueRegs

CFG = isa.load_config("default")
QUEUE = QueueRegs(sq_base=0x100_0000, cq_base=0x200_0000, data_base=0x10_0000, data_limit=0x90_0000,
                  log2_depth=4, log2_slot=16, enable=True)
HAZARD_FREE_QUEUE = 1           # the same registers on queue 1; queue 0 disabled
DEV = 0x10_0000


def rc(op, m, k, n, flags=0, pair=False):
    """A read-compute descriptor of M x K input rows on a K x N operand (TRANS_W: stored N x K)."""
    size = lines(k * n * 2) * (2 if pair else 1)
    rows, cols = (n, k) if flags & Flag.TRANS_W else (k, n)
    return Descriptor(type=DescType.READ_COMPUTE, op=op, dtype=Dtype.FP16, flags=flags, dev_addr=DEV,
                      dev_size=size, dev_rows=rows, dev_cols=cols, in_size=lines(m * k * 2), in_rows=m, in_cols=k)


def softmax(m, n):
    return Descriptor(type=DescType.READ_COMPUTE, op=Op.SOFTMAX, dtype=Dtype.FP16, flags=Flag.PARTIAL,
                      in_size=lines(m * n * 2), in_rows=m, in_cols=n)


CASES = {
    "gemm groups": rc(Op.GEMM, 9, 40, 24),
    "gemm packed rest": rc(Op.GEMM, 3, 37, 8),
    "gemv split": rc(Op.GEMM, 1, 100, 5),
    "gemm trans": rc(Op.GEMM, 2, 24, 40, Flag.TRANS_W),
    "lora xab": rc(Op.LORA_XAB, 5, 64, 16, pair=True),
    "attention": rc(Op.ATTENTION, 6, 40, 24, pair=True),
    "attention trans": rc(Op.ATTENTION, 2, 16, 40, Flag.TRANS_W, pair=True),
    "softmax": softmax(7, 100),
    # more than ACC_SLOTS words a row: column tiles, a run per row of each (7 + 3 words;
    # one input row; 8 + 6 + 3 with the rows N = 545 elements apart)
    "gemm tiled": rc(Op.GEMM, 3, 5, 300),
    "gemv tiled": rc(Op.GEMM, 1, 4, 17 * 32 + 1),
    "lora xab tiled": rc(Op.LORA_XAB, 2, 300, 16, pair=True),
    "attention tiled": rc(Op.ATTENTION, 2, 16, 300, pair=True),
    "load": Descriptor(type=DescType.LOAD, dtype=Dtype.FP16, dev_addr=DEV + 5 * LINE_BYTES, dev_size=9,
                       dev_rows=9, dev_cols=32),
    "store": Descriptor(type=DescType.STORE, dtype=Dtype.FP16, dev_addr=DEV + 2 * LINE_BYTES, dev_size=4,
                        dev_rows=4, dev_cols=32, in_size=4, in_rows=4, in_cols=32),
    "bad op": Descriptor(type=DescType.RESERVED),
}


def model_runs(desc, seq=1, queue_index=HAZARD_FREE_QUEUE, memory=None):
    queues = [QueueRegs(), QUEUE.copy()]
    control = ControlUnit(CFG, memory or SparseMemory(1 << 32))
    control.execute(Entry(desc, queue_index, seq, 0), queues[queue_index], queues, 0, State.initial(CFG),
                    compute_results=False)
    return [(addr, n // LINE_BYTES) for addr, n in control._runs]


def run_front_end(descs, report_at=None, memory=None, side_latency=6):
    """Pop each descriptor (seq 1, 2, ..) on queue 1 as soon as the front end takes it; the
    control unit takes each at once; the reader has always issued. Returns the pop cycles and
    the run starts (cycle, address, lines); `report_at`: the cycle a STORE's report comes.
    A side run's beats (a paged list, from `memory`) come one a cycle, the first
    `side_latency` cycles after its start; a paged descriptor's verdict comes with its task
    (the move's cycle, the status), the side beats' cycles recorded."""
    from hw.front_end import FrontEnd
    dut = FrontEnd(CFG)
    seen = {"pops": [], "runs": [], "verdicts": [], "side": [], "takes": [], "statuses": []}
    side = []                                   # (cycle, beat data) still to come

    async def bench(ctx):
        q = dut.queues[HAZARD_FREE_QUEUE]
        for name in ("sq_base", "cq_base", "data_base", "data_limit", "log2_depth", "log2_slot", "enable"):
            ctx.set(getattr(q, name), int(getattr(QUEUE, name)))
        ctx.set(dut.run_issued, 1)
        pending = list(enumerate(descs, 1))
        for cycle in range(400):
            if pending:
                seq, desc = pending[0]
                ctx.set(dut.pop.valid, 1)
                ctx.set(dut.pop.payload.desc.as_value(), desc.to_int())
                ctx.set(dut.pop.payload.queue, HAZARD_FREE_QUEUE)
                ctx.set(dut.pop.payload.seq, seq)
            else:
                ctx.set(dut.pop.valid, 0)
            ctx.set(dut.task.ready, 1)
            if ctx.get(dut.task.valid):
                seen["takes"].append(cycle)
                seen["statuses"].append(Status(ctx.get(dut.task.payload.decoded.status)))
                if ctx.get(dut.task.payload.decoded.paged):
                    # (the list's verdict, with the task: the move, the cycle before the take)
                    seen["verdicts"].append((cycle - 1, Status(ctx.get(dut.task.payload.verdict))))
                assert ctx.get(dut.task.payload.entry.seq) == len(seen["takes"])
                # the last group of ROWS input rows: its rows' elements
                taken = descs[len(seen["takes"]) - 1]
                tail = taken.in_rows % CFG.rows or CFG.rows
                assert ctx.get(dut.task.payload.last_group_elems) == tail * taken.in_cols
            ctx.set(dut.report, int(cycle == report_at))
            ctx.set(dut.report_store, int(cycle == report_at))
            if pending and ctx.get(dut.pop.ready):
                pending.pop(0)
                seen["pops"].append(cycle)
            if ctx.get(dut.run.valid):
                addr, count = ctx.get(dut.run.payload.addr), ctx.get(dut.run.payload.lines)
                seen["runs"].append((cycle, addr, count))
                if ctx.get(dut.run.payload.side):
                    beat = CFG.beat_bytes
                    first = addr - addr % beat
                    for i in range(-(-(addr + count * LINE_BYTES - first) // beat)):
                        side.append((cycle + side_latency + i, memory.read(first + i * beat, beat)))
            valid = bool(side) and side[0][0] == cycle
            ctx.set(dut.side.valid, int(valid))
            if valid:
                ctx.set(dut.side.payload.data, int.from_bytes(side.pop(0)[1], "little"))
                seen["side"].append(cycle)
            await ctx.tick()

    simulate(dut, bench)
    return seen


@pytest.mark.parametrize("name", list(CASES))
def test_runs_equal_the_model(name):
    desc = CASES[name]
    # every case but the bad one decodes OK (a case that failed would fetch nothing)
    assert (decode(desc, QUEUE, CFG)[0] == Status.OK) == (name != "bad op")
    seen = run_front_end([desc])
    want = model_runs(desc)
    assert [(addr, n) for _, addr, n in seen["runs"]] == want
    if want:
        assert seen["runs"][0][0] == seen["pops"][0] + DECODE_STAGES + 2     # DECODE, CHECK, READY, then the fetch
    # handed over the cycle after the move (READY), with the status the model decodes
    assert seen["takes"][0] == seen["pops"][0] + DECODE_STAGES + 2
    assert seen["statuses"] == [decode(desc, QUEUE, CFG)[0]]
    # runs start one a cycle with the reader always issued, a cycle skipped per empty run
    cycles = [c for c, _, _ in seen["runs"]]
    assert cycles == sorted(set(cycles))


def test_descriptors_back_to_back_keep_their_order():
    descs = [CASES["gemm groups"], CASES["load"], CASES["attention"]]
    seen = run_front_end(descs)
    want = sum((model_runs(d, seq) for seq, d in enumerate(descs, 1)), [])
    assert [(addr, n) for _, addr, n in seen["runs"]] == want


def test_a_store_holds_the_next_descriptors_reads_until_its_report():
    store, gemm = CASES["store"], CASES["gemm groups"]
    report = 60
    seen = run_front_end([store, gemm], report_at=report)
    store_runs, gemm_runs = len(model_runs(store)), len(model_runs(gemm))
    runs = seen["runs"]
    assert len(runs) == store_runs + gemm_runs
    assert runs[store_runs][0] == report + 3                     # the cycle after the report, READY, the fetch
    without = run_front_end([store, gemm], report_at=None)["runs"]
    assert len(without) == store_runs                            # never reported: never fetched


def paged_case(tokens, shift, d, bad_entry=None, m=2):
    """A paged ATTENTION on queue 1 and the memory holding its list (pages 4 KiB apart in
    reverse order); `bad_entry`: (index, address) to spoil."""
    count = -(-tokens // (1 << shift))
    half = (1 << shift) * d * 2
    pages = [DEV + 0x10_0000 + (count - 1 - p) * 2 * half for p in range(count)]
    if bad_entry:
        pages[bad_entry[0]] = bad_entry[1]
    memory = SparseMemory(1 << 32)
    list_addr = DEV + 0x200
    memory.write(list_addr, b"".join(a.to_bytes(8, "little") for a in pages))
    desc = Descriptor(type=DescType.READ_COMPUTE, op=Op.ATTENTION, dtype=Dtype.FP16, flags=page_flags(shift),
                      dev_addr=list_addr, dev_size=lines(count * 8), dev_rows=tokens, dev_cols=d,
                      in_size=lines(m * d * 2), in_rows=m, in_cols=d)
    return desc, memory


@pytest.mark.parametrize("tokens,shift,d,m", [(300, 6, 64, 2), (64, 6, 64, 1), (37, 4, 128, 5), (1, 5, 64, 1),
                                              (130, 6, 32, 3), (130, 6, 288, 1)])
def test_paged_runs_and_verdict_equal_the_model(tokens, shift, d, m):
    """The list as a side run, checked an entry a cycle, the verdict the cycle after the
    last check; then the input and, per stage, a run a page and the last k-group's."""
    desc, memory = paged_case(tokens, shift, d, m=m)
    assert decode(desc, QUEUE, CFG)[0] == Status.OK
    seen = run_front_end([desc], memory=memory)
    want = model_runs(desc, memory=memory)
    assert [(addr, n) for _, addr, n in seen["runs"]] == want
    count = -(-tokens // (1 << shift))
    assert [s for _, s in seen["verdicts"]] == [Status.OK]
    assert seen["verdicts"][0][0] == seen["side"][-1] + 2 + count
    assert seen["runs"][1][0] == seen["verdicts"][0][0] + 1    # READY with the verdict, then the input run


@pytest.mark.parametrize("bad", [(0, DEV + 0x40_0040), (2, QUEUE.data_base - 4096), (4, QUEUE.data_limit - 4096)])
def test_a_bad_page_entry_fails_the_list_and_nothing_else_is_read(bad):
    desc, memory = paged_case(300, 6, 64, bad_entry=bad)
    seen = run_front_end([desc], memory=memory)
    assert [s for _, s in seen["verdicts"]] == [Status.BAD_PAGE]
    assert [(addr, n) for _, addr, n in seen["runs"]] == [(desc.dev_addr, desc.dev_size)]


def test_the_next_list_is_read_among_this_descriptors_runs():
    """Two paged descriptors back to back: the second's list is read at a run of the first
    that begins a stage (before the first's values), not after its last run; each
    descriptor's runs are the model's, in order, and both verdicts are OK."""
    first, memory = paged_case(300, 6, 64)
    list2 = DEV + 0x400
    pages = [DEV + 0x30_0000 + 2 * 64 * 64 * 2 * p for p in range(5)]
    memory.write(list2, b"".join(a.to_bytes(8, "little") for a in pages))
    second = dataclasses.replace(first, dev_addr=list2)
    seen = run_front_end([first, second], memory=memory)
    runs = [(addr, n) for _, addr, n in seen["runs"]]
    want1, want2 = model_runs(first, memory=memory), model_runs(second, 2, memory=memory)
    at = runs.index(want2[0])                                   # the second's list
    assert 1 < at < len(want1) - 1
    assert runs[:at] + runs[at + 1:] == want1 + want2[1:]
    # it took the reader at a stage's first run: the first page's keys or values
    half = 64 * 64 * 2
    first_page = DEV + 0x10_0000 + 4 * 2 * half
    assert runs[at + 1][0] in (first_page, first_page + half)
    assert [s for _, s in seen["verdicts"]] == [Status.OK, Status.OK]

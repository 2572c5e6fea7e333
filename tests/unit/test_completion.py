"""The completion: the RTL (hw/completion.py) against its model (sim/completion.py), cycle
for cycle, behind a writer written out here: the line goes out once the writer is quiet
and a report slot is free, holds the sequence number, the status (DRAM_ERROR for an OK
descriptor with a read or write error) and the cycles; each answer reports, in order,
with DRAM_ERROR for a refused line, and interrupts only a queue that enabled it."""
import pytest

import isa
from ties import simulate
from isa import Status
from isa.microarch import REPORTS_IN_FLIGHT
from sim import completion as model

CFG = isa.load_config("default")

# (queue, seq, decoded status, its read error, a write error pulse before its line, line
# refused by the DRAM, the cycle it arrives, cycles until the writer is quiet after it)
DESCRIPTORS = [
    (0, 1, Status.OK, False, False, False, 3, 0),
    (1, 7, Status.OK, True, False, False, 4, 5),
    (2, 3, Status.OK, False, True, False, 5, 2),
    (3, 9, Status.BAD_OP, True, True, False, 6, 0),
    (0, 2, Status.OK, False, False, True, 7, 1),
    (1, 8, Status.BOUNDS, False, False, True, 8, 0),
    (2, 4, Status.OK, False, False, False, 9, 9),
    (3, 10, Status.OK, False, False, False, 10, 0),
]
TAKEN_BEFORE = 17                    # each was taken this many cycles before it arrives
IRQ_EN = 0b0101


def run(descriptors, answer_after):
    from hw.completion import Completion
    dut = Completion(CFG)
    seen = {"complete": [], "lines": [], "reports": [], "irqs": []}
    answers = []                     # (cycle, refused) of the lines in flight, in order

    async def bench(ctx):
        ctx.set(dut.irq_en, IRQ_EN)
        pending = list(descriptors)
        quiet_from, cycle = None, 0
        while pending or answers or ctx.get(dut.pending):
            ctx.set(dut.cycle, cycle)
            ctx.set(dut.complete.valid, 0)
            if pending and pending[0][6] <= cycle and not ctx.get(dut.pending):
                q, seq, status, read_error, write_error, refused, _, quiet_after = pending.pop(0)
                for name, value in (("queue", q), ("seq", seq), ("taken", cycle - TAKEN_BEFORE),
                                    ("status", status), ("read_error", read_error), ("slot", 0x1000 * seq),
                                    ("store", seq % 2)):
                    ctx.set(dut.complete.payload[name], int(value))
                ctx.set(dut.complete.valid, 1)
                seen["complete"].append(cycle)
                quiet_from, write_pulse, line_refused = cycle + 1 + quiet_after, write_error, refused
            # a write error answered while the descriptor waits (before its line)
            ctx.set(dut.write_error, int(bool(quiet_from) and write_pulse and cycle == quiet_from - 1))
            ctx.set(dut.quiet, int(quiet_from is not None and cycle >= quiet_from))
            ctx.set(dut.hold, 0)
            reported = bool(answers) and answers[0][0] == cycle
            ctx.set(dut.reported, int(reported))
            ctx.set(dut.reported_error, int(reported and answers[0][1]))
            if reported:
                answers.pop(0)
                seen["reports"].append((cycle, ctx.get(dut.done.payload.queue), ctx.get(dut.done.payload.seq),
                                        ctx.get(dut.done.payload.status), ctx.get(dut.done.payload.store)))
                seen["irqs"].append(ctx.get(dut.irq))
            if ctx.get(dut.line_start):
                seen["lines"].append((cycle, ctx.get(dut.line_addr), ctx.get(dut.line)))
                answers.append((cycle + answer_after, line_refused))
                quiet_from = None
            await ctx.tick()
            cycle += 1
            assert cycle < 2000, "the completion hangs"

    simulate(dut, bench)
    return seen


@pytest.mark.parametrize("answer_after", [2, 40])     # 40: the report FIFO fills
def test_lines_and_reports_equal_the_model(answer_after):
    seen = run(DESCRIPTORS, answer_after)
    reports, previous_line = [], -1
    for i, (q, seq, status, read_error, write_error, refused, arrives, quiet_after) in enumerate(DESCRIPTORS):
        complete = max(arrives, previous_line + 1)      # one waits at a time
        assert seen["complete"][i] == complete
        start = model.line_start(complete, complete + 1 + quiet_after, reports)
        line_status = model.status(status, read_error or write_error)
        cycle, addr, line = seen["lines"][i]
        assert (cycle, addr) == (start, 0x1000 * seq)
        assert line.to_bytes(CFG.data_bits // 8, "little")[:64] == model.line(seq, line_status,
                                                                             start - (complete - TAKEN_BEFORE))
        report = start + answer_after
        reports.append(report)
        assert seen["reports"][i] == (report, q, seq, model.report_status(line_status, refused), seq % 2)
        assert seen["irqs"][i] == ((1 << q) if IRQ_EN >> q & 1 else 0)
        previous_line = start
    if answer_after > 10:
        # the fifth line waited for the first report's slot
        assert seen["lines"][REPORTS_IN_FLIGHT][0] == reports[0] + 1


def test_status_rules():
    assert model.status(Status.OK, True) == Status.DRAM_ERROR
    assert model.status(Status.BAD_OP, True) == Status.BAD_OP      # a refused descriptor read nothing
    assert model.report_status(Status.OK, True) == Status.DRAM_ERROR
    assert model.report_status(Status.BOUNDS, False) == Status.BOUNDS

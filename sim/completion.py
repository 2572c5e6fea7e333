"""Model of hw/completion.py: when a descriptor's completion line goes out, what it holds,
and the report its answer makes.

The control unit hands the descriptor over in COMPLETE (cycle `complete`); the line goes
to the writer from the next cycle, once every write before it has been answered (the
writer quiet) and the report FIFO has room: REPORTS_IN_FLIGHT reports, a slot freed the
cycle after the report of the line REPORTS_IN_FLIGHT back. An OK descriptor one of whose
reads or writes the DRAM answered with an error completes DRAM_ERROR; a completion line
the DRAM refuses reports DRAM_ERROR (STATUS), and HEAD moves all the same.
"""
from isa import Status
from isa.microarch import REPORTS_IN_FLIGHT
from isa.slots import CQ_CYCLES, CQ_SEQ, CQ_STATUS, HEADER_BYTES


def line_start(complete, quiet_at, reports):
    """The cycle the completion line's write starts, after COMPLETE at `complete`, the
    writer quiet from `quiet_at`, `reports` the cycles of the reports before it."""
    start = max(complete + 1, quiet_at)
    if len(reports) >= REPORTS_IN_FLIGHT:
        start = max(start, reports[-REPORTS_IN_FLIGHT] + 1)
    return start


def status(decoded, dram_error):
    """The status the line says: DRAM_ERROR for an OK descriptor the DRAM failed."""
    return Status.DRAM_ERROR if decoded == Status.OK and dram_error else Status(decoded)


def line(seq, status_, cycles):
    """The completion line's first HEADER_BYTES: sequence number, status, cycles, zeros."""
    header = bytearray(HEADER_BYTES)
    header[CQ_SEQ:CQ_SEQ + 8] = seq.to_bytes(8, "little")
    header[CQ_STATUS:CQ_STATUS + 4] = int(status_).to_bytes(4, "little")
    header[CQ_CYCLES:CQ_CYCLES + 8] = cycles.to_bytes(8, "little")
    return bytes(header)


def report_status(line_status, refused):
    """What the report writes into the queue's STATUS: DRAM_ERROR for a refused line."""
    return Status.DRAM_ERROR if refused else Status(line_status)

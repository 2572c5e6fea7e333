"""The control unit's front end: takes descriptors from the instruction buffer, decodes
them and starts their DRAM runs ahead of the execution, one descriptor ahead.

    IDLE    pop the next descriptor (while none is held, or the one held is handed to the
            control unit and its runs are all started)
    DECODE  the decoder's first stages (hw/decoder.py), DECODE_STAGES - 1 cycles
    CHECK   its status, and what the decoder found registered for the fetcher and the
            control unit; one that failed reads nothing: DONE
    HAZARD  wait, when the descriptor could read bytes an earlier one still writes:
            - after a STORE (it writes device memory) until every earlier STORE is reported;
            - when it reads inside an enabled queue's CQ ring (where results and
              completions land) until every earlier descriptor is reported
    FETCH   start the reader on each run in the order the control unit takes them (per
            group of ROWS input rows: the input rows, then per stage its whole packs and
            its last k-group; LOAD and STORE: the one copy run), each as soon as the reader
            has issued the previous run's bursts, so each run's DRAM latency hides behind
            the runs before it, the previous descriptor's included
    DONE    wait to hand the descriptor over

A paged ATTENTION's fetch begins with its list: a side run of the reader, whose beats
come here as they arrive (LIST_RUN, LIST_WAIT); the entries are checked one a cycle
(LIST_CHECK, isa/validate.py check_pages) and the verdict (OK, BAD_PAGE, or DRAM_ERROR
for a list beat answered with an error) waits in a register for the control unit. Only
an OK list goes on to the input rows and, per stage, the whole packs as a run a page (the
pages' keys, then their values, half a page further) and the last k-group from its page.

The control unit takes the held descriptor with what it decoded (`task`: decoded once,
here) when it is idle, from the cycle after CHECK. A descriptor counts as in flight from
CHECK until the control unit reports its completion (`report`).
"""
from amaranth import Array, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from isa import DescType, Op, Status
from isa.descriptor import PAGE_ALIGN, PAGE_ENTRY_BYTES
from isa.microarch import DECODE_STAGES, PAGE_LIST_MAX
from isa.slots import HEADER_BYTES, LINE_BYTES
from .command_engine import ibuf_entry
from .decoder import Decoder, decoded_layout
from .axi import RUN_LINES_BITS
from .queue_geometry import ring_end
from .regfile import QueueRegs
from .stage_plan import run_span, stage_count, stage_operand
from .stage_sizes import stage_sizes_layout
from isa.descriptor import DIM_BITS

IN_FLIGHT_BITS = 8          # descriptors popped and not yet reported (ibuf, front end, control unit, reports)


def task_layout(cfg):
    """A descriptor as the front end hands it to the control unit: the instruction buffer's
    entry and what the decoder found."""
    return data.StructLayout({"entry": ibuf_entry(cfg), "decoded": decoded_layout(cfg)})


class FrontEnd(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        nq = cfg.num_queues
        super().__init__({
            "queues": In(QueueRegs).array(nq),
            "pop_valid": In(1), "pop_ready": Out(1), "pop": In(ibuf_entry(cfg)),
            # the reader's run starts
            "run_start": Out(1), "run_addr": Out(64), "run_lines": Out(RUN_LINES_BITS), "run_issued": In(1),
            "run_side": Out(1),
            # the side run's beats (a paged ATTENTION's list), and the list's verdict for the
            # control unit (valid until taken)
            "side_valid": In(1), "side_data": In(cfg.beat_bits), "side_err": In(1),
            "verdict_valid": Out(1), "verdict_status": Out(8), "verdict_take": In(1),
            # the descriptor for the control unit
            "task_valid": Out(1), "task": Out(task_layout(cfg)), "take": In(1),
            # a descriptor's completion reported; whether it was a STORE that ran
            "report": In(1), "report_store": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes = cfg.lanes
        m.submodules.decoder = dec = Decoder(cfg)

        # the descriptor held, whether it is handed over, and what the decoder found (from CHECK)
        entry, held, handed = Signal(ibuf_entry(cfg)), Signal(), Signal()
        decoded, decoded_valid = Signal(decoded_layout(cfg)), Signal()
        decoding = Signal(range(DECODE_STAGES))         # DECODE's cycles left after this one
        regs = Signal(QueueRegs)
        with m.Switch(entry.queue):
            for q, queue_regs in enumerate(self.queues):
                with m.Case(q):
                    m.d.comb += regs.eq(queue_regs)
        d = entry.desc
        m.d.comb += [dec.desc.eq(d), dec.log2_slot.eq(regs.log2_slot),
                     dec.data_base.eq(regs.data_base), dec.data_limit.eq(regs.data_limit)]
        # its submission slot, worked out while the decoder works (the entry and the queues'
        # registers hold still from the pop on): the slot's offset in its ring (step 1), then
        # its address and end (step 2), for the ring check in CHECK and the input runs
        assert DECODE_STAGES >= 3, "CHECK reads the slot's registered address"
        slot_base, slot_offset, slot_size = Signal(64), Signal(64), Signal(49)
        index = (entry.seq - 1)[:16] & ((1 << regs.log2_depth) - 1)
        m.d.sync += [slot_base.eq(regs.sq_base), slot_offset.eq(index << regs.log2_slot[:6]),
                     slot_size.eq(1 << regs.log2_slot[:6])]
        sq_slot, slot_end = Signal(64), Signal(65)
        m.d.sync += [sq_slot.eq(slot_base + slot_offset), slot_end.eq((slot_base + slot_offset)[:64] + slot_size)]

        # ---- descriptors in flight, and the STOREs among them
        in_flight, stores = Signal(IN_FLIGHT_BITS), Signal(IN_FLIGHT_BITS)
        issue, issue_store = Signal(), Signal()
        m.d.sync += [in_flight.eq(in_flight + issue - self.report),
                     stores.eq(stores + issue_store - (self.report & self.report_store))]

        # the ranges it reads: its submission slot (checked in CHECK), its device operand
        # (registered, from the pop on)
        dev_end = d.dev_addr + (d.dev_size << 6)
        in_cq = []
        for q, q_regs in enumerate(self.queues):
            # each CQ ring's end, registered (a queue's registers are written long before a
            # descriptor of it, or one that could read its ring, is popped)
            end = Signal(65, name=f"cq_end{q}")
            m.d.sync += end.eq(ring_end(q_regs.cq_base, q_regs))
            operand_in = Signal(name=f"operand_in_cq{q}")
            m.d.sync += operand_in.eq((d.dev_size != 0) & (d.dev_addr < end) & (q_regs.cq_base < dev_end))
            in_cq.append(q_regs.enable & (((sq_slot < end) & (q_regs.cq_base < slot_end)) | operand_in))
        reads_cq = Signal()
        m.d.comb += reads_cq.eq(_any(in_cq))
        hazard = ((stores != 0) | (reads_cq & (in_flight != 0)))

        # ---- the fetcher's progress through the runs
        INPUT_RUN, MAIN_RUN, REST_RUN, COPY_RUN, LIST_RUN, LIST_WAIT, LIST_CHECK = range(7)
        f_on, f_kind, f_stage = Signal(), Signal(range(7)), Signal()
        # the group's first input row and element, and its elements (registered with them)
        f_m0, f_in_elem, f_in_elems = Signal(DIM_BITS), Signal(44), Signal(44)
        m_rows = d.in_rows
        stages = stage_count(d)

        # a group's input elements: ROWS rows, or the last group's rows (worked out while the
        # descriptor decodes: its entry holds still from the pop on)
        assert cfg.rows & (cfg.rows - 1) == 0, "ROWS a power of two: a group's elements a shift"
        last_group_elems = Signal(44)
        tail_rows = m_rows & (cfg.rows - 1)
        m.d.sync += last_group_elems.eq(Mux(tail_rows == 0, cfg.rows, tail_rows) * d.in_cols)

        def group_elems(m0):
            """Input elements of the group from row m0."""
            return Mux(m_rows - m0 <= cfg.rows, last_group_elems, d.in_cols << (cfg.rows.bit_length() - 1))
        # the stage's sizes, worked out by the decoder (hw/stage_sizes.py)
        f_addr = stage_operand(d, decoded.second_addr, f_stage)[0]
        f_sizes = Signal(stage_sizes_layout(lanes))
        m.d.comb += f_sizes.eq(decoded.stages[f_stage])
        f_main, f_rest_elems = f_sizes.main_elems, f_sizes.rest_elems
        input_run = run_span(m, sq_slot + HEADER_BYTES, f_in_elem, f_in_elems, cfg, "input_run")
        main_run = run_span(m, f_addr, 0, f_main, cfg, "main_run")
        rest_run = run_span(m, f_addr, f_main, f_rest_elems, cfg, "rest_run")
        run_addr, run_lines, run_any = Signal(64), Signal(RUN_LINES_BITS), Signal()

        # ---- a paged ATTENTION: its list (the page table), checked an entry a cycle
        paged = decoded.paged
        entries = Array(Signal(64, name=f"page{i}") for i in range(PAGE_LIST_MAX))
        list_beat, list_err = Signal(range(PAGE_LIST_MAX + 1)), Signal()
        # the list is at most PAGE_LIST_MAX entries from a multiple of their size: the
        # entries' places in the side beats depend only on where that is in a beat
        list_bytes = PAGE_LIST_MAX * PAGE_ENTRY_BYTES
        places = max(1, cfg.beat_bytes // list_bytes)
        place = d.dev_addr[(list_bytes - 1).bit_length():(cfg.beat_bytes - 1).bit_length()] if places > 1 else 0
        with m.If(self.side_valid):
            m.d.sync += [list_beat.eq(list_beat + 1), list_err.eq(list_err | self.side_err)]
            for i in range(PAGE_LIST_MAX):
                for where in range(places):
                    at = where * list_bytes + i * PAGE_ENTRY_BYTES
                    with m.If((place == where) & (list_beat == at // cfg.beat_bytes)):
                        m.d.sync += entries[i].eq(self.side_data.word_select((at % cfg.beat_bytes) // 8, 64))
        line_log2 = (LINE_BYTES - 1).bit_length()
        chan_log2 = (cfg.dram_channels - 1).bit_length()
        list_first = d.dev_addr[line_log2:line_log2 + chan_log2] if chan_log2 else 0
        list_in = list_beat == ((list_first + d.dev_size + cfg.dram_channels - 1) >> chan_log2)
        # the page in hand: checked (LIST_CHECK), read (MAIN_RUN), or the last k-group's (REST_RUN)
        f_page = Signal(range(PAGE_LIST_MAX))
        shift, half = decoded.page_shift, decoded.page_half
        rest_page = f_sizes.rest_page[:len(f_page)]
        page = Signal(64)
        m.d.comb += page.eq(entries[Mux(f_kind == REST_RUN, rest_page, f_page)])
        # an entry checked: aligned, its keys and values inside the data range (its start at
        # most data_limit - 2 half, worked out once the descriptor is decoded, the cycle
        # after CHECK: the list's beats come a DRAM latency later)
        checked = Signal(64)
        m.d.comb += checked.eq(entries[f_page])
        page_room, room_ok = Signal(64), Signal()
        m.d.sync += [page_room.eq(regs.data_limit - (half << 1)), room_ok.eq(regs.data_limit >= (half << 1))]
        page_bad = ((checked[:(PAGE_ALIGN - 1).bit_length()] != 0) | (checked < regs.data_base)
                    | ~room_ok | (checked > page_room))
        bad, verdict_valid, verdict_status = Signal(), Signal(), Signal(8)
        bad_now = bad | page_bad
        last_check = f_page + 1 >= decoded.pages
        m.d.comb += [self.verdict_valid.eq(verdict_valid), self.verdict_status.eq(verdict_status)]
        with m.If(self.verdict_take):
            m.d.sync += verdict_valid.eq(0)
        # a stage's pages: the whole packs' rows, a run a page, then the last k-group's run;
        # from the page's keys (stage 0) or values (half a page on, stage 1), the offset from
        # registers added to the entry once
        values_elem = Mux(f_stage, half >> 1, 0)
        main_pages = f_sizes.main_pages
        page_elems = Signal(44)
        m.d.comb += page_elems.eq(Mux(f_page + 1 < main_pages, f_sizes.cols_dim << shift, f_sizes.last_elems))
        page_run = run_span(m, page, values_elem, page_elems, cfg, "page_run")
        page_rest = run_span(m, page, values_elem + f_sizes.tail_elems, f_rest_elems, cfg, "page_rest")
        with m.Switch(f_kind):
            with m.Case(INPUT_RUN):
                m.d.comb += [run_addr.eq(input_run[0]), run_lines.eq(input_run[1]), run_any.eq(1)]
            with m.Case(MAIN_RUN):
                m.d.comb += [run_addr.eq(Mux(paged, page_run[0], main_run[0])),
                             run_lines.eq(Mux(paged, page_run[1], main_run[1])), run_any.eq(f_main != 0)]
            with m.Case(REST_RUN):
                m.d.comb += [run_addr.eq(Mux(paged, page_rest[0], rest_run[0])),
                             run_lines.eq(Mux(paged, page_rest[1], rest_run[1])), run_any.eq(f_rest_elems != 0)]
            with m.Case(COPY_RUN):
                m.d.comb += [run_addr.eq(Mux(decoded.is_load, d.dev_addr, sq_slot + HEADER_BYTES)),
                             run_lines.eq(d.dev_size), run_any.eq(d.dev_size != 0)]
            with m.Case(LIST_RUN):
                m.d.comb += [run_addr.eq(d.dev_addr), run_lines.eq(d.dev_size), run_any.eq(1)]
        # a step: a run started (or skipped, when empty), the list in, an entry checked
        step = Signal()
        with m.Switch(f_kind):
            with m.Case(LIST_WAIT):
                m.d.comb += step.eq(f_on & list_in)
            with m.Case(LIST_CHECK):
                m.d.comb += step.eq(f_on & (~last_check | ~verdict_valid))
            with m.Default():
                m.d.comb += step.eq(f_on & (~run_any | self.run_issued))
        with m.If(step):
            m.d.comb += [self.run_start.eq(run_any), self.run_addr.eq(run_addr), self.run_lines.eq(run_lines),
                         self.run_side.eq(f_kind == LIST_RUN)]
            # the next run: the stage's last k-group, the next stage, or the next group's rows
            with m.If(f_kind == COPY_RUN):
                m.d.sync += f_on.eq(0)
            with m.Elif(f_kind == LIST_RUN):
                m.d.sync += f_kind.eq(LIST_WAIT)
            with m.Elif(f_kind == LIST_WAIT):
                m.d.sync += [f_kind.eq(LIST_CHECK), f_page.eq(0), bad.eq(0)]
            with m.Elif(f_kind == LIST_CHECK):
                with m.If(~last_check):
                    m.d.sync += [f_page.eq(f_page + 1), bad.eq(bad_now)]
                with m.Else():
                    ok_list = ~list_err & ~bad_now
                    m.d.sync += [verdict_valid.eq(1), f_page.eq(0),
                                 verdict_status.eq(Mux(list_err, Status.DRAM_ERROR,
                                                       Mux(bad_now, Status.BAD_PAGE, Status.OK)))]
                    with m.If(ok_list):
                        m.d.sync += f_kind.eq(INPUT_RUN)
                    with m.Else():
                        m.d.sync += f_on.eq(0)
            with m.Elif((f_kind == MAIN_RUN) & paged & (f_page + 1 < main_pages)):
                m.d.sync += f_page.eq(f_page + 1)
            with m.Elif(f_kind == MAIN_RUN):
                m.d.sync += [f_kind.eq(REST_RUN), f_page.eq(0)]
            with m.Elif((f_kind == INPUT_RUN) & (stages != 0)):
                m.d.sync += [f_kind.eq(MAIN_RUN), f_stage.eq(0)]
            with m.Elif((f_kind == REST_RUN) & (f_stage + 1 < stages)):
                m.d.sync += [f_kind.eq(MAIN_RUN), f_stage.eq(1)]
            with m.Else():
                m.d.sync += [f_kind.eq(INPUT_RUN), f_m0.eq(f_m0 + cfg.rows),
                             f_in_elem.eq(f_in_elem + cfg.rows * d.in_cols),
                             f_in_elems.eq(group_elems(f_m0 + cfg.rows))]
                with m.If(f_m0 + cfg.rows >= m_rows):
                    m.d.sync += f_on.eq(0)

        # ---- the hand-over: the held descriptor, once decoded
        m.d.comb += [self.task_valid.eq(held & ~handed & decoded_valid),
                     self.task.entry.eq(entry), self.task.decoded.eq(decoded)]
        with m.If(self.take):
            m.d.sync += handed.eq(1)

        def fetch_start(found):
            """Issue the descriptor `found` decoded OK: its fetch starts the next cycle."""
            m.d.comb += [issue.eq(1), issue_store.eq(found.is_store)]
            m.d.sync += [f_on.eq(1),
                         f_kind.eq(Mux(found.is_compute, Mux(found.paged, LIST_RUN, INPUT_RUN), COPY_RUN)),
                         f_stage.eq(0), f_m0.eq(0), f_in_elem.eq(0), f_in_elems.eq(group_elems(0)), f_page.eq(0),
                         list_beat.eq(0), list_err.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.pop_ready.eq(1)
                with m.If(self.pop_valid):
                    m.d.sync += [entry.eq(self.pop), held.eq(1), handed.eq(0), decoded_valid.eq(0),
                                 decoding.eq(DECODE_STAGES - 2)]
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += decoding.eq(decoding - 1)
                with m.If(decoding == 0):
                    m.next = "CHECK"
            with m.State("CHECK"):
                found = dec.decoded
                m.d.sync += [decoded.eq(found), decoded_valid.eq(1)]
                with m.If(found.status != Status.OK):
                    m.d.comb += issue.eq(1)
                    m.next = "DONE"
                with m.Elif(hazard):
                    m.next = "HAZARD"
                with m.Else():
                    fetch_start(found)
                    m.next = "FETCH"
            with m.State("HAZARD"):
                with m.If(~hazard):
                    fetch_start(decoded)
                    m.next = "FETCH"
            with m.State("FETCH"):
                with m.If(~f_on):
                    m.next = "DONE"
            with m.State("DONE"):
                with m.If(handed | self.take):
                    m.d.sync += held.eq(0)
                    m.next = "IDLE"
        return m


def _any(bits):
    out = bits[0]
    for b in bits[1:]:
        out = out | b
    return out

"""The control unit's front end: takes descriptors from the instruction buffer, decodes
them and starts their DRAM runs ahead of the execution. It holds two descriptors, and the
tasks of those that moved on before the control unit took them:

Slot 2, the next descriptor:
    IDLE        pop the next descriptor (once the one before has moved to slot 1)
    DECODE      the decoder's first stages (hw/decoder.py), DECODE_STAGES - 1 cycles
    CHECK       its status, and what the decoder found, registered; one that failed
                reads nothing: READY
    HAZARD      wait, when the descriptor could read bytes an earlier one still writes:
                - after a STORE (it writes device memory) until every earlier STORE is reported;
                - when it reads inside an enabled queue's CQ ring (where results and
                  completions land) until every earlier descriptor is reported
    LIST_REQ    a paged ATTENTION: its list's run asks for the reader (below)
    LIST_WAIT   the list's beats come here as they arrive (a side run of the reader)
    LIST_CHECK  an entry a cycle (isa/validate.py check_pages); the verdict (OK, BAD_PAGE,
                or DRAM_ERROR for a list beat answered with an error) is registered, and
                goes to the control unit with the descriptor's task
    READY       move to slot 1 once slot 1 is free and the queue of tasks has room

Slot 1, the descriptor whose runs start, until its last run has started (then it is
free): as it moves in, its task goes into a queue of TASK_QUEUE for the control unit,
which takes the tasks in order as it gets to them. Its fetcher starts the reader on each run in the
order the control unit takes them (per group of ROWS input rows: the input rows, then
per stage its whole packs, a run a page when paged, and its last k-group; LOAD and
STORE: the one copy run), each as soon as the reader has issued the previous run's
bursts, so each run's DRAM latency hides behind the runs before it, the previous
descriptor's included. Only an OK descriptor (and list) fetches.

The list's run takes the reader when slot 1's fetcher is at a run that begins something
(an input run, a copy run, a stage's first run) or has no run left: so the next
descriptor's list is read among this one's runs and its pages' reads follow this
descriptor's without a DRAM latency between (the DRAM answers in order). The spec's
"a descriptor with a non-zero status reads no device operand" holds: the list is read
only once its descriptor is decoded OK and its hazards are clear.

The control unit takes each descriptor's task with what it decoded (`task`: decoded once,
here) when it is idle, from the cycle after the move. A descriptor counts as in flight from
CHECK until the control unit reports its completion (`report`).
"""
from amaranth import Array, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from isa import Status
from isa.descriptor import DIM_BITS, PAGE_ALIGN, PAGE_ENTRY_BYTES
from isa.microarch import DECODE_STAGES, PAGE_LIST_MAX, TASK_QUEUE
from isa.pe_array import ACC_SLOTS
from isa.slots import HEADER_BYTES, LINE_BYTES

from . import fifo
from .axi import RUN_LINES_BITS
from .command_engine import ibuf_entry
from .decoder import Decoder, decoded_layout
from .dram_reader import run_layout
from .queue_geometry import ring_end, slot_index
from .regfile import QueueRegs
from .stage_plan import run_span, stage_count, stage_operand, tile_span
from .stage_sizes import stage_sizes_layout
from .stream import beat_layout

IN_FLIGHT_BITS = 8          # descriptors popped and not yet reported (ibuf, front end, control unit, reports)


def task_layout(cfg):
    """A descriptor as the front end hands it to the control unit: the instruction buffer's
    entry, what the decoder found, its submission and completion slots' addresses, the
    input elements of its last group of ROWS rows (worked out once, for both), and a paged
    ATTENTION's list verdict (OK, BAD_PAGE, or DRAM_ERROR for a list beat answered with an
    error; OK for every other descriptor)."""
    return data.StructLayout({"entry": ibuf_entry(cfg), "decoded": decoded_layout(cfg),
                              "sq_slot": 64, "cq_slot": 64, "last_group_elems": 44, "verdict": 8})


class FrontEnd(wiring.Component):
    def __init__(self, cfg):
        self._cfg = cfg
        nq = cfg.num_queues
        super().__init__({
            "queues": In(QueueRegs).array(nq),
            "pop": In(stream.Signature(ibuf_entry(cfg))),
            # the reader's runs, and whether it has issued the last one's every burst
            "run": Out(stream.Signature(run_layout(), always_ready=True)), "run_issued": In(1),
            # the side run's beats (a paged ATTENTION's list)
            "side": In(stream.Signature(beat_layout(cfg.beat_bits), always_ready=True)),
            # the descriptors for the control unit, in order (a queue of TASK_QUEUE)
            "task": Out(stream.Signature(task_layout(cfg))),
            # a descriptor's completion reported; whether it was a STORE that ran
            "report": In(1), "report_store": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        lanes = cfg.lanes
        m.submodules.decoder = dec = Decoder(cfg)

        # ==== slot 2: the next descriptor, decoded, its hazards cleared, its list checked
        entry2 = Signal(ibuf_entry(cfg))
        decoded2 = Signal(decoded_layout(cfg))
        fetch2 = Signal()                               # it reads: decoded OK (and its list OK)
        decoding = Signal(range(DECODE_STAGES))         # DECODE's cycles left after this one
        regs2 = Signal(QueueRegs)
        with m.Switch(entry2.queue):
            for q, queue_regs in enumerate(self.queues):
                with m.Case(q):
                    m.d.comb += regs2.eq(queue_regs)
        d2 = entry2.desc
        m.d.comb += [dec.desc.eq(d2), dec.log2_slot.eq(regs2.log2_slot),
                     dec.data_base.eq(regs2.data_base), dec.data_limit.eq(regs2.data_limit)]
        # its submission slot, worked out while the decoder works (the entry and the queues'
        # registers hold still from the pop on): the slot's offset in its ring (step 1), then
        # its address and end (step 2), for the ring check in CHECK, the input runs and the
        # control unit (with the completion slot's address)
        assert DECODE_STAGES >= 3, "CHECK reads the slot's registered address"
        slot_base, cq_base, slot_offset, slot_size = Signal(64), Signal(64), Signal(64), Signal(49)
        m.d.sync += [slot_base.eq(regs2.sq_base), cq_base.eq(regs2.cq_base),
                     slot_offset.eq(slot_index(entry2.seq, regs2) << regs2.log2_slot[:6]),
                     slot_size.eq(1 << regs2.log2_slot[:6])]
        sq_slot2, cq_slot2, slot_end = Signal(64), Signal(64), Signal(65)
        m.d.sync += [sq_slot2.eq(slot_base + slot_offset), cq_slot2.eq(cq_base + slot_offset),
                     slot_end.eq((slot_base + slot_offset)[:64] + slot_size)]
        # a group's input elements: ROWS rows, or the last group's rows (the entry holds still)
        assert cfg.rows & (cfg.rows - 1) == 0, "ROWS a power of two: a group's elements a shift"
        last_group_elems2 = Signal(44)
        tail_rows = d2.in_rows & (cfg.rows - 1)
        m.d.sync += last_group_elems2.eq(Mux(tail_rows == 0, cfg.rows, tail_rows) * d2.in_cols)

        # ---- descriptors in flight, and the STOREs among them
        in_flight, stores = Signal(IN_FLIGHT_BITS), Signal(IN_FLIGHT_BITS)
        issue, issue_store = Signal(), Signal()
        # (the counts with and without the issue worked out beside it, which comes late: the
        # decoder's verdict)
        reported, stores_reported = in_flight - self.report, stores - (self.report & self.report_store)
        m.d.sync += [in_flight.eq(Mux(issue, reported + 1, reported)),
                     stores.eq(Mux(issue_store, stores_reported + 1, stores_reported))]

        # the ranges it reads: its submission slot (checked in CHECK), its device operand
        # (registered, from the pop on)
        dev_end = d2.dev_addr + (d2.dev_size << 6)
        in_cq = []
        for q, q_regs in enumerate(self.queues):
            # each CQ ring's end, registered (a queue's registers are written long before a
            # descriptor of it, or one that could read its ring, is popped)
            end = Signal(65, name=f"cq_end{q}")
            m.d.sync += end.eq(ring_end(q_regs.cq_base, q_regs))
            operand_in = Signal(name=f"operand_in_cq{q}")
            m.d.sync += operand_in.eq((d2.dev_size != 0) & (d2.dev_addr < end) & (q_regs.cq_base < dev_end))
            in_cq.append(q_regs.enable & (((sq_slot2 < end) & (q_regs.cq_base < slot_end)) | operand_in))
        reads_cq = Signal()
        m.d.comb += reads_cq.eq(_any(in_cq))
        hazard = ((stores != 0) | (reads_cq & (in_flight != 0)))

        # ---- a paged ATTENTION's list (its page table), checked an entry a cycle
        table2 = Array(Signal(64, name=f"next_page{i}") for i in range(PAGE_LIST_MAX))
        list_beat, list_err = Signal(range(PAGE_LIST_MAX + 1)), Signal()
        # the list is at most PAGE_LIST_MAX entries from a multiple of their size: the
        # entries' places in the side beats depend only on where that is in a beat
        list_bytes = PAGE_LIST_MAX * PAGE_ENTRY_BYTES
        places = max(1, cfg.beat_bytes // list_bytes)
        place = d2.dev_addr[(list_bytes - 1).bit_length():(cfg.beat_bytes - 1).bit_length()] if places > 1 else 0
        with m.If(self.side.valid):
            m.d.sync += [list_beat.eq(list_beat + 1), list_err.eq(list_err | self.side.payload.err)]
            for i in range(PAGE_LIST_MAX):
                for where in range(places):
                    at = where * list_bytes + i * PAGE_ENTRY_BYTES
                    with m.If((place == where) & (list_beat == at // cfg.beat_bytes)):
                        m.d.sync += table2[i].eq(self.side.payload.data.word_select((at % cfg.beat_bytes) // 8, 64))
        line_log2 = (LINE_BYTES - 1).bit_length()
        chan_log2 = (cfg.dram_channels - 1).bit_length()
        list_first = d2.dev_addr[line_log2:line_log2 + chan_log2] if chan_log2 else 0
        list_in = list_beat == ((list_first + d2.dev_size + cfg.dram_channels - 1) >> chan_log2)
        # an entry checked: aligned, its keys and values inside the data range (its start at
        # most data_limit - 2 half, worked out once the descriptor is decoded, the cycle
        # after CHECK: the list's beats come a DRAM latency later)
        c_page = Signal(range(PAGE_LIST_MAX))
        checked = Signal(64)
        m.d.comb += checked.eq(table2[c_page])
        half2 = decoded2.page_half
        page_room, room_ok = Signal(64), Signal()
        m.d.sync += [page_room.eq(regs2.data_limit - (half2 << 1)), room_ok.eq(regs2.data_limit >= (half2 << 1))]
        page_bad = ((checked[:(PAGE_ALIGN - 1).bit_length()] != 0) | (checked < regs2.data_base)
                    | ~room_ok | (checked > page_room))
        bad = Signal()
        bad_now = bad | page_bad
        last_check = c_page + 1 >= decoded2.pages
        # the list's verdict, handed over with the descriptor (OK for every other one)
        verdict2 = Signal(8)

        # ==== slot 1: the descriptor whose runs start, until taken and its last run started
        entry1 = Signal(ibuf_entry(cfg))
        decoded1 = Signal(decoded_layout(cfg))
        sq_slot1, last_group_elems1 = Signal(64), Signal(44)
        table1 = Array(Signal(64, name=f"page{i}") for i in range(PAGE_LIST_MAX))
        d1 = entry1.desc

        # ---- the fetcher's progress through the runs
        INPUT_RUN, MAIN_RUN, REST_RUN, COPY_RUN = range(4)
        f_on, f_kind, f_stage = Signal(), Signal(range(4)), Signal()
        f_stage_start = Signal()                        # at the stage's first run
        # the group's first input row and element, and its elements (registered with them)
        f_m0, f_in_elem, f_in_elems = Signal(DIM_BITS), Signal(44), Signal(44)
        m_rows = d1.in_rows
        stages = stage_count(d1)

        def group_elems(m0):
            """Input elements of slot 1's group from row m0."""
            return Mux(m_rows - m0 <= cfg.rows, last_group_elems1, d1.in_cols << (cfg.rows.bit_length() - 1))
        # the stage's sizes, worked out by the decoder (hw/stage_sizes.py)
        f_addr = stage_operand(d1, decoded1.second_addr, f_stage)[0]
        f_sizes = Signal(stage_sizes_layout(lanes))
        m.d.comb += f_sizes.eq(decoded1.stages[f_stage])
        f_main, f_rest_elems = f_sizes.main_elems, f_sizes.rest_elems
        input_run = run_span(m, sq_slot1 + HEADER_BYTES, f_in_elem, f_in_elems, cfg, "input_run")
        main_run = run_span(m, f_addr, 0, f_main, cfg, "main_run")
        rest_run = run_span(m, f_addr, f_main, f_rest_elems, cfg, "rest_run")
        run_addr, run_lines, run_any = Signal(64), Signal(RUN_LINES_BITS), Signal()
        # a paged stage's pages: the whole packs' rows, a run a page, then the last k-group's
        # run; from the page's keys (stage 0) or values (half a page on, stage 1). The run's
        # first byte (its page's entry and the offset into it) and a page run's elements are
        # registered with the fetcher's step to the run (below): the run's lines are then
        # one add from registers
        paged = decoded1.paged
        f_page = Signal(range(PAGE_LIST_MAX))
        shift, half = decoded1.page_shift, decoded1.page_half
        main_pages = f_sizes.main_pages
        page_first, page_elems = Signal(64), Signal(44)
        page_run = run_span(m, page_first, 0, page_elems, cfg, "page_run")
        page_rest = run_span(m, page_first, 0, f_rest_elems, cfg, "page_rest")
        # a tiled stage (isa/pe_array.py: its weights in column tiles): a run per row of a
        # tile, from `page_first` (the row's first byte, registered: the operand's, or its
        # page's), `f_row` the row, `f_tile_off` the tile's first byte in a row (its first
        # word's), `f_left` and `f_elems` the words and elements of a row from it on, `f_cols`
        # the tile's elements a row. Between two tiles a cycle with no run (`f_turn`) works
        # out the next tile's first byte and elements from the registers its last row set;
        # `f_row0` is row 0's first byte in a row (the operand's, or page 0's keys or values),
        # `f_page_off` a tile's offset in a page (the values' half included)
        tiled = ~f_sizes.trans & (f_sizes.n_words > ACC_SLOTS)
        f_row, f_tile_off, f_turn = Signal(DIM_BITS), Signal(DIM_BITS + 1), Signal()
        f_left, f_elems, f_cols = Signal(DIM_BITS), Signal(DIM_BITS), Signal(DIM_BITS)
        f_row0, f_page_off = Signal(64), Signal(48)
        tile_run = run_span(m, page_first, 0, f_cols, cfg, "tile_run")
        tile_words, _, tile_more = tile_span(f_left, f_elems, lanes)
        # a tile's row after this one, and whether it is in the next page (paged)
        row_more = f_row + 1 < f_sizes.full_groups
        page_change = paged & (((f_row + 1) & ((1 << shift) - 1)) == 0)
        lane_bits = (lanes - 1).bit_length()

        def values_elem(stage):
            return Mux(stage, half >> 1, 0)

        def elems_of_page(sizes, page):
            """A whole-packs run's elements in page `page`: a page's rows, the last page's rest."""
            return Mux(page + 1 < sizes.main_pages, sizes.cols_dim << shift, sizes.last_elems)

        def to_stage(stage):
            """The step into `stage`'s runs: its first page's (and its first tile's row 0)."""
            sizes = decoded1.stages[stage]
            _, cols0, _ = tile_span(sizes.n_words, sizes.cols_dim, lanes)
            row0 = Mux(paged, table1[0] + (values_elem(stage) << 1), stage_operand(d1, decoded1.second_addr, stage)[0])
            m.d.sync += [page_first.eq(row0), f_row0.eq(row0), f_page_off.eq(values_elem(stage) << 1),
                         page_elems.eq(elems_of_page(sizes, 0)), f_stage_start.eq(1), f_turn.eq(0),
                         f_row.eq(0), f_tile_off.eq(0), f_left.eq(sizes.n_words), f_elems.eq(sizes.cols_dim),
                         f_cols.eq(cols0)]
        with m.Switch(f_kind):
            with m.Case(INPUT_RUN):
                m.d.comb += [run_addr.eq(input_run[0]), run_lines.eq(input_run[1]), run_any.eq(1)]
            with m.Case(MAIN_RUN):
                m.d.comb += [run_addr.eq(Mux(tiled, tile_run[0], Mux(paged, page_run[0], main_run[0]))),
                             run_lines.eq(Mux(tiled, tile_run[1], Mux(paged, page_run[1], main_run[1]))),
                             run_any.eq((f_main != 0) & ~f_turn)]
            with m.Case(REST_RUN):
                m.d.comb += [run_addr.eq(Mux(paged, page_rest[0], rest_run[0])),
                             run_lines.eq(Mux(paged, page_rest[1], rest_run[1])), run_any.eq(f_rest_elems != 0)]
            with m.Case(COPY_RUN):
                m.d.comb += [run_addr.eq(Mux(decoded1.is_load, d1.dev_addr, sq_slot1 + HEADER_BYTES)),
                             run_lines.eq(d1.dev_size), run_any.eq(d1.dev_size != 0)]

        # ---- the reader's one source a cycle: slot 2's list run, at a run of slot 1 that
        # begins something (or with no run left), else slot 1's step: a run started (or
        # skipped, when empty)
        list_req = Signal()
        at_point = (f_kind == INPUT_RUN) | (f_kind == COPY_RUN) | ((f_kind == MAIN_RUN) & f_stage_start)
        list_grant = list_req & self.run_issued & (~f_on | at_point)
        step = f_on & (~run_any | self.run_issued) & ~(list_req & at_point)
        with m.If(list_grant):
            m.d.comb += [self.run.valid.eq(1), self.run.payload.addr.eq(d2.dev_addr),
                         self.run.payload.lines.eq(d2.dev_size), self.run.payload.side.eq(1)]
        with m.Elif(step):
            m.d.comb += [self.run.valid.eq(run_any), self.run.payload.addr.eq(run_addr),
                         self.run.payload.lines.eq(run_lines)]
        with m.If(step):
            # the next run: the next page, the stage's last k-group, the next stage, or the
            # next group's rows
            with m.If(f_kind == MAIN_RUN):
                m.d.sync += f_stage_start.eq(0)
            with m.If(f_kind == COPY_RUN):
                m.d.sync += f_on.eq(0)
            with m.Elif((f_kind == MAIN_RUN) & f_turn):
                # the cycle between two tiles: the next tile's row 0 and its elements a row
                m.d.sync += [f_turn.eq(0), page_first.eq(f_row0 + f_tile_off),
                             f_page_off.eq((values_elem(f_stage) << 1) + f_tile_off),
                             f_cols.eq(tile_span(f_left, f_elems, lanes)[1])]
            with m.Elif((f_kind == MAIN_RUN) & tiled & row_more):
                # the tile's next row: N elements on, or the next page's first (below)
                m.d.sync += [f_row.eq(f_row + 1), f_page.eq(f_page + page_change),
                             page_first.eq(page_first + (f_sizes.cols_dim << 1))]
            with m.Elif((f_kind == MAIN_RUN) & tiled & tile_more):
                # the tile's last row: the next tile's first word on, its rows from row 0
                m.d.sync += [f_turn.eq(1), f_row.eq(0), f_page.eq(0),
                             f_tile_off.eq(f_tile_off + (tile_words << (lane_bits + 1))),
                             f_left.eq(f_left - tile_words), f_elems.eq(f_elems - (tile_words << lane_bits))]
            with m.Elif((f_kind == MAIN_RUN) & ~tiled & paged & (f_page + 1 < main_pages)):
                m.d.sync += [f_page.eq(f_page + 1), page_elems.eq(elems_of_page(f_sizes, f_page + 1))]
            with m.Elif(f_kind == MAIN_RUN):
                m.d.sync += [f_kind.eq(REST_RUN), f_page.eq(0),
                             page_first.eq(table1[f_sizes.rest_page[:len(f_page)]]
                                           + ((values_elem(f_stage) + f_sizes.tail_elems) << 1))]
            with m.Elif((f_kind == INPUT_RUN) & (stages != 0)):
                m.d.sync += [f_kind.eq(MAIN_RUN), f_stage.eq(0)]
                to_stage(0)
            with m.Elif((f_kind == REST_RUN) & (f_stage + 1 < stages)):
                m.d.sync += [f_kind.eq(MAIN_RUN), f_stage.eq(1)]
                to_stage(1)
            with m.Else():
                m.d.sync += [f_kind.eq(INPUT_RUN), f_m0.eq(f_m0 + cfg.rows),
                             f_in_elem.eq(f_in_elem + cfg.rows * d1.in_cols),
                             f_in_elems.eq(group_elems(f_m0 + cfg.rows))]
                with m.If(f_m0 + cfg.rows >= m_rows):
                    m.d.sync += f_on.eq(0)
            # the step to a paged stage's next page (the next run's, or a tile's next row's
            # in it): its first byte, the deepest of page_first's values, in the last mux
            to_page = Mux(tiled, ~f_turn & row_more & page_change, f_page + 1 < main_pages)
            with m.If((f_kind == MAIN_RUN) & paged & to_page):
                m.d.sync += page_first.eq(table1[f_page + 1] + f_page_off)

        # ---- the hand-over: slot 2's READY descriptor moves into slot 1 once slot 1 is free
        # (its last run has started) and the queue of tasks for the control unit has room; its
        # task goes into that queue as it moves (the control unit takes the tasks in order,
        # each from the cycle after its move, as it gets to them)
        m.submodules.tasks = tasks = fifo.SyncFIFO(width=task_layout(cfg).size, depth=TASK_QUEUE)
        pushed, _ = fifo.entries(tasks, task_layout(cfg))
        m.d.comb += [self.task.valid.eq(tasks.r_rdy), self.task.payload.eq(tasks.r_data),
                     tasks.r_en.eq(self.task.ready),
                     pushed.entry.eq(entry2), pushed.decoded.eq(decoded2), pushed.sq_slot.eq(sq_slot2),
                     pushed.cq_slot.eq(cq_slot2), pushed.last_group_elems.eq(last_group_elems2),
                     pushed.verdict.eq(verdict2)]
        slot1_free = ~f_on & tasks.w_rdy
        move = Signal()
        m.d.comb += tasks.w_en.eq(move)
        with m.If(move):
            m.d.sync += [entry1.eq(entry2), decoded1.eq(decoded2),
                         sq_slot1.eq(sq_slot2), last_group_elems1.eq(last_group_elems2),
                         f_on.eq(fetch2), f_kind.eq(Mux(decoded2.is_compute, INPUT_RUN, COPY_RUN)),
                         f_stage.eq(0), f_m0.eq(0), f_in_elem.eq(0), f_page.eq(0),
                         f_in_elems.eq(Mux(d2.in_rows <= cfg.rows, last_group_elems2,
                                           d2.in_cols << (cfg.rows.bit_length() - 1)))]
            m.d.sync += [table1[i].eq(table2[i]) for i in range(PAGE_LIST_MAX)]

        def issued(found, ok):
            """The descriptor `found` counts as in flight; `ok`: it reads (its list first, if paged)."""
            m.d.comb += [issue.eq(1), issue_store.eq(ok & found.is_store)]
            m.d.sync += verdict2.eq(Status.OK)
            with m.If(ok & found.paged):
                m.d.sync += [list_beat.eq(0), list_err.eq(0)]
                m.next = "LIST_REQ"
            with m.Else():
                m.d.sync += fetch2.eq(ok)
                m.next = "READY"

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.pop.ready.eq(1)
                with m.If(self.pop.valid):
                    m.d.sync += [entry2.eq(self.pop.payload), decoding.eq(DECODE_STAGES - 2)]
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += decoding.eq(decoding - 1)
                with m.If(decoding == 0):
                    m.next = "CHECK"
            with m.State("CHECK"):
                found = dec.decoded
                m.d.sync += decoded2.eq(found)
                with m.If(found.status != Status.OK):
                    issued(found, 0)
                with m.Elif(hazard):
                    m.next = "HAZARD"
                with m.Else():
                    issued(found, 1)
            with m.State("HAZARD"):
                with m.If(~hazard):
                    issued(decoded2, 1)
            with m.State("LIST_REQ"):
                m.d.comb += list_req.eq(1)
                with m.If(list_grant):
                    m.next = "LIST_WAIT"
            with m.State("LIST_WAIT"):
                with m.If(list_in):
                    m.d.sync += [c_page.eq(0), bad.eq(0)]
                    m.next = "LIST_CHECK"
            with m.State("LIST_CHECK"):
                with m.If(~last_check):
                    m.d.sync += [c_page.eq(c_page + 1), bad.eq(bad_now)]
                with m.Else():
                    m.d.sync += [verdict2.eq(Mux(list_err, Status.DRAM_ERROR, Mux(bad_now, Status.BAD_PAGE, Status.OK))),
                                 fetch2.eq(~list_err & ~bad_now)]
                    m.next = "READY"
            with m.State("READY"):
                m.d.comb += move.eq(slot1_free)
                with m.If(slot1_free):
                    m.next = "IDLE"
        return m


def _any(bits):
    out = bits[0]
    for b in bits[1:]:
        out = out | b
    return out

"""The pyuvm environment's plumbing on the model (no simulator): the run's settings parsed
once from the variables and back (verify/settings.py), and the monitor's view of the host
side (verify/uvm/monitor.py) rebuilt from the accesses alone: the completions the driver
read, each doorbell's class, and whether the PASID rules refuse an access. The env itself
runs on the RTL (tests/rtl/test_verify.py)."""
import asyncio
import dataclasses

import pytest

import isa
from driver import NdpDevice
from driver.errors import MemAccessError, RegisterAccessError
from driver.model_transport import ModelTransport
from isa import Status
from isa import regs as R
from rtlbench import stream
from verify import fuzz
from verify.settings import SIZES, SettingsError, VerifySettings
from verify.uvm import items
from verify.uvm.driver import configure
from verify.uvm.monitor import Access, BusEvent, CompletionSeen, HostSideView, WatchedTransport

# ---- settings ------------------------------------------------------------------------------


def test_settings_defaults_and_every_variable():
    assert VerifySettings.from_env({}) == VerifySettings()
    s = VerifySettings.from_env({"NDP_CONFIG": "quad", "COCOTB_TOPLEVEL": "ndp_device", "NDP_UVM_SIZE": "bfm",
                                 "NDP_VERIFY_SEED": "0x10", "NDP_VERIFY_COUNT": "7", "NDP_VERIFY_OUT": "/x/r.json",
                                 "NDP_UNRELATED": "1"})
    assert s == VerifySettings(config="quad", top="ndp_device", size="bfm", seed=16, count=7, out="/x/r.json")
    assert (s.backend, s.host_port, s.corners, s.require_goals, s.counts) == ("rtl", True, False, False, SIZES["bfm"])
    assert s.report_path("-corrupted") == "/x/r-corrupted.json" and s.count_or(3) == 7
    assert VerifySettings().backend == "rtl_fast" and VerifySettings().count_or(3) == 3


def test_settings_reach_the_simulator_through_their_variables_unchanged():
    s = VerifySettings(config="default", size="full", seed=5, count=9, out="/tmp/o.json")
    # the runner sets the config and the top itself
    assert VerifySettings.from_env({**s.env(), "NDP_CONFIG": "default", "COCOTB_TOPLEVEL": "ndp_fast_top"}) == s
    assert "NDP_VERIFY_COUNT" not in VerifySettings().env()


@pytest.mark.parametrize("env, message", [
    ({"NDP_UVM_SIZE": "huge"}, "NDP_UVM_SIZE='huge': one of full, reduced, bfm"),
    ({"NDP_VERIFY_SEED": "seven"}, "NDP_VERIFY_SEED='seven': an integer"),
    ({"NDP_VERIFY_COUNT": "-1"}, "NDP_VERIFY_COUNT=-1"),
    ({"COCOTB_TOPLEVEL": "other"}, "COCOTB_TOPLEVEL='other': one of ndp_device, ndp_fast_top"),
])
def test_a_bad_variable_is_named_with_what_it_may_be(env, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        VerifySettings.from_env(env)


def test_items_are_told_apart_by_type():
    kinds = {cls.kind for cls in items.PROTOCOL_ITEMS} | {items.DescriptorItem.kind}
    assert len(kinds) == len(items.PROTOCOL_ITEMS) + 1
    assert items.StallsItem("s", on=True).kind == "backpressure_on"


def test_the_compute_mix_fits_the_envs_slots():
    """make verify's compute mix (rtlbench/stream.py's shapes, drawn for 256 KiB slots) in the
    env's 16 KiB slots: every input fits once cut, only the oversize ones are cut, and the
    cut keeps the kind and the columns."""
    from verify.uvm.sequences import fit_slot
    cfg = isa.load_config("default")
    room = (1 << fuzz.LOG2_SLOT) - 64
    recipes = [r for seed in (5, 13) for batch in stream.generate(seed, 400, cfg) for r in batch]

    def payload(r):
        operands, x = r.arrays()
        return operands.nbytes if r.kind == "store" else 0 if x is None else x.nbytes
    cut = 0
    for r in recipes:
        f = fit_slot(r)
        assert payload(f) <= room, (r.label(), f.label())
        if payload(r) <= room:
            assert f is r
        else:
            cut += 1
            assert (f.kind, f.n) == (r.kind, r.n) and payload(f) > room - 4 * max(r.n, r.k), (r.label(), f.label())
    assert cut >= 2     # the STOREs of 73 x 137 and 66 x 126 that stopped make verify


# ---- the monitor's view of the host side, on the model -------------------------------------


def run_on_model(body, backdoor=False):
    """body(dev, queues, transport) on the model, every access through a WatchedTransport;
    returns (what body returned, the accesses in order)."""
    cfg = isa.load_config("default")
    accesses = []

    async def main():
        inner = ModelTransport(cfg, backdoor_memory=backdoor)
        dev = await NdpDevice.open(WatchedTransport(inner, accesses.append))
        queues = await configure(dev, cfg)
        return await body(dev, queues, dev.transport)
    return asyncio.run(main()), accesses


def seen_by(accesses, host_port=True):
    view = HostSideView(isa.load_config("default").num_queues, host_port)
    return [o for a in accesses for o in view.see(a)] + view.unfinished()


def test_the_monitor_sees_each_completion_the_driver_read():
    cfg = isa.load_config("default")
    recipes = [r for batch in stream.generate(3, 30, cfg) for r in batch]

    async def body(dev, queues, t):
        out = []
        for r in recipes:
            queue = queues[r.queue % len(queues)]
            desc, payload = await stream.prepare(dev, queue, r, r.arrays())
            out.append(await queue.run(desc, payload, timeout_cycles=fuzz.TIMEOUT_CYCLES))
            queue.free_all()
        return out
    completions, accesses = run_on_model(body)
    seen = [o for o in seen_by(accesses) if isinstance(o, CompletionSeen)]
    assert [(s.queue, s.seq, s.descriptor, s.status, s.cycles, s.result) for s in seen] == \
           [(c.queue, c.seq, c.descriptor, c.status, c.cycles, c.result) for c in completions]
    assert {c.status for c in completions} > {Status.OK}, "the mix has bad descriptors too"
    assert any(c.result for c in completions)


def test_doorbells_are_classified_from_the_accesses():
    async def body(dev, queues, t):
        queue = queues[0]
        recipe = stream.Item(0, "gemv", m=1, k=16, n=8, seed=1)
        desc, payload = await stream.prepare(dev, queue, recipe, recipe.arrays())
        [(seq, _, _)] = queue.take([(desc, payload)])
        slot = queue.sq_slot(seq)
        await t.mem_write(slot, desc.pack(), queue.pasid)
        await t.reg_write(R.queue_reg(0, R.DOORBELL), seq, queue.pasid)          # before the valid word
        await t.mem_write(slot + 32, seq.to_bytes(8, "little"), queue.pasid)
        await queue.wait(seq, fuzz.TIMEOUT_CYCLES)
        await t.reg_write(R.queue_reg(0, R.DOORBELL), seq, queue.pasid)          # the same tail
        await t.reg_write(R.queue_reg(0, R.DOORBELL), seq - 1, queue.pasid)      # a stale one
        with pytest.raises(RegisterAccessError):
            await t.reg_write(R.queue_reg(0, R.DOORBELL), seq, queue.pasid + 1)  # a foreign one
        with pytest.raises(RegisterAccessError):
            await t.reg_write(R.queue_reg(0, R.DATA_LIMIT_LO), 0, queue.pasid)   # a foreign config write
        queue.free_all()
        seqs = await queue.submit_many([(desc, payload)] * queue.depth)         # a full ring, wrapped
        for s in seqs:
            await queue.wait(s, fuzz.TIMEOUT_CYCLES)
        return seq
    seq, accesses = run_on_model(body)
    events = [o for o in seen_by(accesses) if isinstance(o, BusEvent)]
    doorbells = [e for e in events if e.kind == "doorbell"]
    d = [e.detail for e in doorbells]
    assert [(e.refused, e.must_refuse) for e in doorbells] == [(False, False)] * 3 + [(True, True), (False, False)]
    assert d[0]["before_valid"] and not any(x["before_valid"] for x in d[1:])
    assert d[1]["repeated"] and d[2]["stale"] and d[4]["full"] and d[4]["wrapped"]
    assert not any(x["full"] or x["wrapped"] or x["repeated"] or x["stale"] for x in d[:1])
    foreign = [e for e in events if e.kind == "config_write" and e.pasid != R.HOST_PASID]
    assert [(e.refused, e.must_refuse) for e in foreign] == [(True, True)]
    # every accepted configuration write was the host's
    assert all(e.must_refuse == e.refused for e in events)


def test_the_pasid_filter_on_cxl_mem_is_predicted():
    async def body(dev, queues, t):
        other = queues[1]
        with pytest.raises(MemAccessError):
            await t.mem_read(other.sq_slot(1), 64, queues[0].pasid)
        await t.mem_read(other.sq_slot(1), 64, other.pasid)
    _, accesses = run_on_model(body)
    events = [o for o in seen_by(accesses) if isinstance(o, BusEvent) and o.kind == "mem_access"]
    assert [(e.queue, e.refused, e.must_refuse) for e in events] == [(1, True, True)]


def test_a_device_that_breaks_the_pasid_rules_is_flagged():
    """What the scoreboard holds against the rules: an accepted foreign doorbell and a
    refused host configuration write each come out with refused != must_refuse."""
    view = HostSideView(4, host_port=True)
    view.see(Access("reg_write", R.queue_reg(0, R.CFG), R.HOST_PASID, R.cfg_value(3, 14, 0x100)))
    [doorbell] = view.see(Access("reg_write", R.queue_reg(0, R.DOORBELL), 0x200, 1))
    [config] = view.see(Access("reg_write", R.queue_reg(0, R.CTRL), R.HOST_PASID, 1, 4, "SLVERR"))
    assert (doorbell.refused, doorbell.must_refuse) == (False, True)
    assert (config.refused, config.must_refuse) == (True, False)
    # and the refused write changed nothing the view keeps: the queue is still disabled
    assert not view.rings[0].enabled


def test_a_completion_read_without_its_result_is_still_reported():
    async def body(dev, queues, t):
        queue = queues[0]
        recipe = stream.Item(0, "gemv", m=1, k=16, n=8, seed=2)
        desc, payload = await stream.prepare(dev, queue, recipe, recipe.arrays())
        seq = await queue.submit(desc, payload)
        await t.wait_cycles(20000)
        return await t.mem_read(queue.cq_slot(seq), 64, queue.pasid), seq    # the header only
    (_, seq), accesses = run_on_model(body)
    [seen] = [o for o in seen_by(accesses) if isinstance(o, CompletionSeen)]
    assert dataclasses.astuple(seen)[1] == seq and seen.status == Status.OK and seen.result == b""


# ---- the scoreboard's checks on what the monitor saw ---------------------------------------


@pytest.fixture
def scoreboard():
    """A scoreboard out of any run: its phases called by hand, fed through its two exports."""
    from pyuvm import ConfigDB, uvm_root

    from verify.uvm.scoreboard import NdpScoreboard
    uvm_root().clear_children()
    ConfigDB().clear()
    ConfigDB().set(None, "*", "SETTINGS", VerifySettings())
    board = NdpScoreboard("scoreboard", None)
    board.build_phase()
    board.connect_phase()
    board.start_of_simulation_phase()

    def check(item_completions, seen):
        for i, (expected, completions) in enumerate(item_completions):
            item = items.DescriptorItem(f"d{i}", queue=0)
            item.expected, item.completions = expected, completions
            board.item_export.write(item)
        for observed in seen:
            board.seen_export.write(observed)
        board.check_phase()
        return board.errors
    return check


DESC = isa.Descriptor.from_int(0)


def completion(seq, status=Status.OK, result=b"ab"):
    from driver.queue import Completion
    return Completion(seq, status, 5, result, 0, DESC)


def seen(seq, status=Status.OK, result=b"ab"):
    return CompletionSeen(0, seq, DESC, status, 5, result)


def test_the_scoreboard_accepts_what_the_monitor_confirms(scoreboard):
    assert scoreboard([(Status.OK, [completion(1)]), (Status.BAD_OP, [completion(2, Status.BAD_OP, b"")])],
                      [seen(1), seen(2, Status.BAD_OP, b""), BusEvent("doorbell", 0, 0x100, False, False, {})]) == []


@pytest.mark.parametrize("case, items_, seen_, message", [
    ("a duplicate", [(Status.OK, [completion(1)])], [seen(1), seen(1)], "no item waited for"),
    ("unseen", [(Status.OK, [completion(1)])], [], "seen by no monitor"),
    ("the driver misread", [(Status.OK, [completion(1)])], [seen(1, result=b"ac")], "the transport carried"),
    ("a wrong status", [(Status.OK, [completion(1, Status.BOUNDS, b"")])], [seen(1, Status.BOUNDS, b"")],
     "status BOUNDS, expected OK"),
    ("a result with an error", [(Status.BOUNDS, [completion(1, Status.BOUNDS)])], [seen(1, Status.BOUNDS)],
     "a result reported with status BOUNDS"),
    ("a foreign doorbell taken", [], [BusEvent("doorbell", 0, 0x200, False, True, {})],
     "was accepted, the PASID rules refuse it"),
    ("a host write refused", [], [BusEvent("config_write", 0, 0, True, False, {})],
     "was refused, the PASID rules accept it"),
])
def test_the_scoreboard_fails_on_what_the_monitor_contradicts(scoreboard, case, items_, seen_, message):
    errors = scoreboard(items_, seen_)
    assert len(errors) == 1 and message in errors[0], (case, errors)

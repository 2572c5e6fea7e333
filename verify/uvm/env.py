"""The env (sequencer, driver, monitor, scoreboard, coverage) and its tests.

The test's top takes the run's settings (verify/settings.py, parsed once from the
variables the runner set) and the bench's HostPort and puts both in ConfigDB; every
component gets them from there. The driver feeds its items to the scoreboard and the
coverage, the monitor what it saw cross the transport to both."""
import json

import pyuvm
from pyuvm import ConfigDB, uvm_env, uvm_factory, uvm_sequencer, uvm_test

from isa import Status, slots
from verify.settings import VerifySettings

from . import coverage as cov
from .coverage import NdpCoverage
from .driver import NdpDriver
from .monitor import U32, U64, HostPort, TransportMonitor
from .scoreboard import NdpScoreboard
from .sequences import ComputeSeq, TopSeq


class NdpEnv(uvm_env):
    def build_phase(self):
        self.seqr = uvm_sequencer("seqr", self)
        ConfigDB().set(None, "*", "SEQR", self.seqr)
        # created through the factory, so that a test may override a component's type
        self.driver = NdpDriver.create("driver", self)
        self.monitor = TransportMonitor.create("monitor", self)
        self.scoreboard = NdpScoreboard.create("scoreboard", self)
        self.coverage = NdpCoverage.create("coverage", self)

    def connect_phase(self):
        self.driver.seq_item_port.connect(self.seqr.seq_item_export)
        self.driver.ap.connect(self.scoreboard.item_export)
        self.driver.ap.connect(self.coverage.analysis_export)
        self.monitor.ap.connect(self.scoreboard.seen_export)
        self.monitor.ap.connect(self.coverage.analysis_export)


class NdpTest(uvm_test):
    """TopSeq at the counts of the settings' size, from their seed; writes the coverage
    report and the scoreboard's summary to their out file (JSON); fails on any scoreboard
    error and on any goal missed (but on the bench's short run, which covers fewer shapes)."""

    report_suffix = ""

    def build_phase(self):
        # the top of the run: the settings and the bench's host port, for every component
        self.settings = VerifySettings.from_env()
        ConfigDB().set(None, "*", "SETTINGS", self.settings)
        ConfigDB().set(None, "*", "HOST_PORT", HostPort())
        self.env = NdpEnv("env", self)

    def end_of_elaboration_phase(self):
        s = self.settings
        self.seq = TopSeq("top", s.device_config(), s.counts, s.seed, host_port=s.host_port, corners=s.corners)

    async def run_phase(self):
        self.raise_objection()
        await self.seq.start(self.env.seqr)
        self.drop_objection()

    @property
    def require_goals(self):
        return self.settings.require_goals

    def report_phase(self):
        out = self.settings.report_path(self.report_suffix)
        goals = cov.report(out, cov.GOALS)
        board = self.env.scoreboard
        with open(out) as f:
            record = json.load(f)
        record["scoreboard"] = board.summary
        record["errors"] = board.errors[:50]
        with open(out, "w") as f:
            json.dump(record, f, indent=1)
        for goal, (item, hit, required, missed) in goals.items():
            self.logger.info(f"coverage goal {goal!r} ({item}): {hit} of {required} bins"
                             + (f", MISSED {missed}" if missed or not required else ""))
        assert not board.errors, f"{len(board.errors)} scoreboard errors, first: {board.errors[0]}"
        missed = [goal for goal, (_, _, required, missing) in goals.items() if missing or not required]
        assert not (missed and self.require_goals), f"coverage goals missed: {missed} (report {out})"


class CorruptingTransport:
    """A device that gets things wrong, put between the device and the host port (so the
    driver and the monitor both see it): every third new completion that says OK says
    BOUNDS instead, one bit of every fifth result read flipped."""

    def __init__(self, inner):
        self.inner = inner
        self.last_seq = {}         # CQ header address -> the seq it held at the last read
        self.headers = self.results = 0
        self.header_at = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def mem_read(self, addr, length, pasid):
        data = await self.inner.mem_read(addr, length, pasid)
        if length == slots.HEADER_BYTES:
            seq = U64.unpack_from(data, slots.CQ_SEQ)[0]
            status = U32.unpack_from(data, slots.CQ_STATUS)[0]
            self.header_at = addr
            if seq and self.last_seq.get(addr) != seq and status == Status.OK:
                self.last_seq[addr] = seq
                self.headers += 1
                if self.headers % 3 == 0:
                    data = data[:slots.CQ_STATUS] + U32.pack(Status.BOUNDS) + data[slots.CQ_STATUS + 4:]
        elif addr == (self.header_at or 0) + slots.CQ_PAYLOAD and length:
            self.results += 1
            if self.results % 5 == 0:
                data = bytes([data[0] ^ 1]) + data[1:]
        return data


class CorruptingDriver(NdpDriver):
    """The driver on a device that corrupts completions (CorruptingTransport)."""

    def transport(self, transport):
        return CorruptingTransport(transport)


class ScoreboardCatchesCorruptionTest(NdpTest):
    """NdpTest over a short compute mix with CorruptingDriver (a factory override), whose
    device answers wrong statuses and flips result bits: it must fail, naming a result that
    differs from the model and a status against the rules (verify/cocotb_uvm.py)."""

    report_suffix = "-corrupted"

    def build_phase(self):
        uvm_factory().set_type_override_by_type(NdpDriver, CorruptingDriver)
        super().build_phase()

    require_goals = False

    def end_of_elaboration_phase(self):
        self.seq = ComputeSeq("compute", self.settings.device_config(), 40, 3)


__all__ = ["NdpTest", "ScoreboardCatchesCorruptionTest", "pyuvm"]

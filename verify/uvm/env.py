"""The env (sequencer, driver, monitor, scoreboard, coverage) and its tests."""
import dataclasses
import json
import os

import pyuvm
from pyuvm import ConfigDB, uvm_env, uvm_factory, uvm_sequencer, uvm_test

from isa import Status

from . import coverage as cov
from .coverage import NdpCoverage
from .driver import NdpDriver
from .monitor import TransportMonitor
from .scoreboard import NdpScoreboard
from .sequences import ComputeSeq, TopSeq

# the counts of the random parts of TopSeq: the full run (`make verify`), the reduced one
# (`make test`), and the cocotbext-axi bench's, which runs ~200x slower than the fast path
SIZES = {"full": {"compute": 400, "backpressure": 100, "fuzz": 1000},
         "reduced": {"compute": 40, "backpressure": 12, "fuzz": 400},
         "bfm": {"compute": 8, "backpressure": 6, "fuzz": 60}}


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
        self.monitor.ap.connect(self.coverage.analysis_export)


class NdpTest(uvm_test):
    """TopSeq at the counts of NDP_UVM_SIZE (full or reduced, the default), seed
    NDP_VERIFY_SEED; writes the coverage report and the scoreboard's summary to
    NDP_VERIFY_OUT (JSON); fails on any scoreboard error and on any goal missed."""

    def build_phase(self):
        # run_test starts from a fresh ConfigDB: the backend registered before goes in now
        ConfigDB().set(None, "*", "BACKEND", _registered["backend"])
        self.env = NdpEnv("env", self)

    def end_of_elaboration_phase(self):
        backend = ConfigDB().get(self, "", "BACKEND")
        size = os.environ.get("NDP_UVM_SIZE", "reduced")
        # the bench's run checks every part but covers fewer shapes: no goals there
        self.require_goals = size != "bfm"
        self.seq = TopSeq("top", backend.cfg, SIZES[size], int(os.environ.get("NDP_VERIFY_SEED", 1)),
                          host_port=backend.name == "rtl", corners=size != "bfm")

    async def run_phase(self):
        self.raise_objection()
        await self.seq.start(self.env.seqr)
        self.drop_objection()

    report_suffix = ""

    def report_phase(self):
        out = (os.environ.get("NDP_VERIFY_OUT") or "coverage.json").replace(".json", f"{self.report_suffix}.json")
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


class CorruptingDriver(NdpDriver):
    """A device that gets things wrong, for the proof that the scoreboard catches it: every
    seventh OK completion with a result gets one bit flipped, every eleventh a wrong status."""

    def start_of_simulation_phase(self):
        super().start_of_simulation_phase()
        self.seen = 0

    def publish(self, item):
        for i, completion in enumerate(item.completions):
            self.seen += 1
            if completion.result and self.seen % 7 == 0:
                flipped = bytes([completion.result[0] ^ 1]) + completion.result[1:]
                item.completions[i] = dataclasses.replace(completion, result=flipped)
            elif self.seen % 11 == 0:
                item.completions[i] = dataclasses.replace(completion, status=Status.BOUNDS)
        super().publish(item)


class ScoreboardCatchesCorruptionTest(NdpTest):
    """NdpTest with CorruptingDriver (a factory override) over a short compute mix: it must
    fail, naming a result that differs from the model and a status against the rules."""

    report_suffix = "-corrupted"

    def build_phase(self):
        uvm_factory().set_type_override_by_type(NdpDriver, CorruptingDriver)
        super().build_phase()

    def end_of_elaboration_phase(self):
        backend = ConfigDB().get(self, "", "BACKEND")
        self.require_goals = False
        self.seq = ComputeSeq("compute", backend.cfg, 40, 3)


_registered = {}


def register(backend):
    """Hand the started backend to the next NdpTest (verify/cocotb_uvm.py)."""
    _registered["backend"] = backend


__all__ = ["NdpTest", "ScoreboardCatchesCorruptionTest", "register", "pyuvm"]

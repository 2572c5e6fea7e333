"""make test's share of `make verify` (verify/cli.py runs each at full size): the pyuvm
environment at its reduced size on the fast path, its coverage goals (a test that fails
when a named goal is missed) and the proof its scoreboard can fail; fuzzing, resets and the
soak on the fast path at reduced counts."""
import json

import pytest

import isa
from verify import rtl, soak
from verify.settings import VerifySettings
from verify.uvm import coverage


@pytest.fixture(scope="module")
def uvm_report(tmp_path_factory):
    from rtlbench import runner
    out = tmp_path_factory.mktemp("uvm") / "coverage.json"
    runner.run_fast("verify.cocotb_uvm", config="default",
                    env=VerifySettings(config="default", size="reduced", out=str(out)).env())
    return json.loads(out.read_text())


@pytest.mark.parametrize("goal", list(coverage.GOALS))
def test_uvm_coverage_goal_is_met(uvm_report, goal):
    outcome = uvm_report["goals"][goal]
    assert outcome["required"] > 0 and outcome["met"], (goal, outcome)


def test_uvm_scoreboard_checked_against_the_model(uvm_report):
    board = uvm_report["scoreboard"]
    assert board["errors"] == 0 and board["replayed"] >= 150 and board["timed"] >= 100, board
    assert board["cycle_error_worst"] <= 5.0
    # the scoreboard's completions and PASID checks come from the monitor: it saw every
    # completion the driver read, and the foreign doorbells and configuration writes of
    # every queue refused
    assert board["completions_seen"] >= board["replayed"] and board["refused"] >= 8, board
    # every fault the descriptor reached completed DRAM_ERROR, every unreached one OK
    for key, n in board["faults"].items():
        reached = "unreached" not in key
        assert key.endswith("DRAM_ERROR") == reached, key


def test_fuzz_on_the_rtl():
    result = rtl.run_rtl("fuzz", "default", 400, seed=11)
    statuses = {isa.Status[name] for name in ("OK", "BAD_OP", "BAD_DTYPE", "BOUNDS", "BAD_SHAPE")}
    assert result["count"] == 400 and {int(s) for s in statuses} <= {int(k) for k in result["by_status"]}


def test_reset_in_the_middle_of_work():
    result = rtl.run_rtl("reset", "default", 12, seed=5)
    assert result["resets"] == 12 and result["mid_batch"] + result["before_any"] >= 3, result


def test_soak_under_backpressure_matches_the_model():
    result = soak.run("default", 300, seed=9)
    assert (result.count, result.lost, result.duplicated, result.mismatched) == (300, 0, 0, 0), result
    assert all(result.stalls[k] > 0 for k in ("ar", "r", "aw", "w", "b")), result.stalls

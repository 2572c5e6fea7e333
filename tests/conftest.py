import os
import pathlib
import sys

# the project's packages live at the repo root (also installed editable by `make venv`)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# The configs the RTL tops are built for in this session: NDP_RTL_CONFIGS, the default config
# alone unless set. Each other config is a Verilator build of its own per top (3 to 5 minutes
# on two cores) plus its runs, so `make test` leaves them out to stay within its 15-minute
# budget (measured: 21.6 min with small on the fast path and quad's validation in it) and
# `make test-rtl-configs` runs them (NDP_RTL_CONFIGS="small quad"); the quad lint stays in
# make test.
RTL_CONFIGS = os.environ.get("NDP_RTL_CONFIGS", "default").split()

# The full size of the tests that `make test` runs smaller to stay within CI's 15 minutes on
# two cores: NDP_TEST_FULL=1 (`make test-full`) runs the items marked `slow` (cases of a
# parametrization beyond the ones make test keeps, the paper-size and many-iteration runs)
# and makes the tests that read FULL below draw their full counts (hypothesis examples,
# stream lengths); without it the slow items are deselected.
FULL = os.environ.get("NDP_TEST_FULL", "") not in ("", "0")


def bench_config(item):
    """The config an item builds an RTL top for (ndp_device with the cocotbext-axi bench, or
    the fast path's ndp_fast_top), else None: test_rtl.py's, test_fast.py's and
    test_validate.py's items."""
    params = item.callspec.params if hasattr(item, "callspec") else {}
    if "config" not in params or item.path.name not in ("test_rtl.py", "test_fast.py", "test_validate.py"):
        return None
    return params["config"]


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if bench_config(item) not in (None, *RTL_CONFIGS)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
        config._ndp_bench_deselected = len(dropped)
    slow = [] if FULL else [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        drop = set(slow)
        items[:] = [item for item in items if item not in drop]
        config._ndp_slow_deselected = len(slow)


def pytest_terminal_summary(terminalreporter, config):
    dropped = getattr(config, "_ndp_bench_deselected", 0)
    if dropped:
        terminalreporter.write_line(
            f"{dropped} RTL items with configs outside NDP_RTL_CONFIGS={' '.join(RTL_CONFIGS)!r} "
            f"deselected: make test-rtl-configs runs them")
    slow = getattr(config, "_ndp_slow_deselected", 0)
    if slow:
        terminalreporter.write_line(
            f"{slow} slow items deselected, smaller counts drawn: make test-full (NDP_TEST_FULL=1) runs the "
            f"suite at full size")

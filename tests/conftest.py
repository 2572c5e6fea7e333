import os
import pathlib
import sys

# the project's packages live at the repo root (also installed editable by `make venv`)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# The configs run on ndp_device with the cocotbext-axi bench in this session: NDP_RTL_CONFIGS,
# the default config alone unless set. Each other config is a Verilator build of its own
# (about 3 minutes on two cores) plus its runs, so `make test` leaves them out to stay within
# its 15-minute budget and `make test-rtl-configs` runs them (NDP_RTL_CONFIGS=small). Items on
# the fast path (ndp_fast_top, test_fast.py) run on every config regardless.
RTL_CONFIGS = os.environ.get("NDP_RTL_CONFIGS", "default").split()


def bench_config(item):
    """The config an item builds ndp_device with the cocotbext-axi bench for, else None:
    test_rtl.py's items, and test_validate.py's where validate runs on that bench."""
    params = item.callspec.params if hasattr(item, "callspec") else {}
    if "config" not in params:
        return None
    if item.path.name == "test_rtl.py":
        return params["config"]
    validate = getattr(item.module, "validate", None) if item.path.name == "test_validate.py" else None
    if validate is not None:
        import isa
        return params["config"] if validate.default_backend(isa.load_config(params["config"])) == "bfm" else None
    return None


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if bench_config(item) not in (None, *RTL_CONFIGS)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
        config._ndp_bench_deselected = len(dropped)


def pytest_terminal_summary(terminalreporter, config):
    dropped = getattr(config, "_ndp_bench_deselected", 0)
    if dropped:
        terminalreporter.write_line(
            f"{dropped} items on ndp_device (cocotbext-axi bench) with configs outside "
            f"NDP_RTL_CONFIGS={' '.join(RTL_CONFIGS)!r} deselected: make test-rtl-configs runs them")

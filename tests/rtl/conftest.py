"""The Verilator benches share build folders per config and top (runner.py): under
pytest-xdist (`make test` runs two workers) they all go to one worker, in order, while the
other worker runs the unit tests."""
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid.startswith("tests/rtl/"):
            item.add_marker(pytest.mark.xdist_group("verilator"))

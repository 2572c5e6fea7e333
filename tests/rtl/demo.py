"""Run the demo bench quietly: `python tests/rtl/demo.py` (what `make demo` does)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import run  # noqa: E402

if __name__ == "__main__":
    run("cocotb_demo", env={"COCOTB_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore::DeprecationWarning"})

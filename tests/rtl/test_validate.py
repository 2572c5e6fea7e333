"""The cycle model against the RTL on random streams (what `make validate` prints):
results and statuses must match exactly, cycles within the targets: the default and the
small config on the cocotbext-axi bench, the four-channel config on the fast path.

On the default config `make test` runs the first 120 descriptors of `make validate`'s
stream (every kind of descriptor is among them, and 10 of the 14 kinds of bad one; the
scenarios on every backend have them all), `make test-full` (NDP_TEST_FULL=1,
tests/conftest.py) all 240."""
import os

import pytest

from rtlbench import validate

FULL = os.environ.get("NDP_TEST_FULL", "") not in ("", "0")


@pytest.mark.parametrize("config,seed,count", [("default", 1, 240 if FULL else 120), ("small", 5, 200),
                                               ("quad", 3, 200)])
def test_model_matches_rtl_on_random_stream(config, seed, count):
    cfg = validate.isa.load_config(config)
    backend = validate.default_backend(cfg)
    model = validate.run_model(cfg, seed, count, backend)
    rows, summary = validate.compare(model, validate.run_rtl(config, seed, count, backend))
    bad = [row for row in rows if row[3] != row[4] or row[8]]
    assert summary["mismatched_bytes"] == 0 and summary["status_mismatches"] == 0, bad[:5]
    assert summary["n"] == count >= 120
    assert summary["median"] <= 2.0, summary
    assert summary["worst"] <= 5.0, sorted(rows, key=lambda r: -abs(r[7]))[:5]

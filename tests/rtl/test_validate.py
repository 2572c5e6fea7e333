"""The cycle model against the RTL on random streams (what `make validate` prints):
results and statuses must match exactly, cycles within the targets, on both configs."""
import pytest

import validate


@pytest.mark.parametrize("config,seed,count", [("default", 1, 240), ("small", 5, 200)])
def test_model_matches_rtl_on_random_stream(config, seed, count):
    model = validate.run_model(validate.isa.load_config(config), seed, count)
    rows, summary = validate.compare(model, validate.run_rtl(config, seed, count))
    bad = [row for row in rows if row[3] != row[4] or row[8]]
    assert summary["mismatched_bytes"] == 0 and summary["status_mismatches"] == 0, bad[:5]
    assert summary["n"] >= 200
    assert summary["median"] <= 2.0, summary
    assert summary["worst"] <= 5.0, sorted(rows, key=lambda r: -abs(r[7]))[:5]

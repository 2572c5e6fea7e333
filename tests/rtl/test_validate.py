"""The cycle model against the RTL on a random stream (what `make validate` prints):
results and statuses must match exactly, cycles within the targets."""
import validate


def test_model_matches_rtl_on_random_stream():
    model, rtl = validate.run_model(validate.isa.load_config("default"), 1, 240), validate.run_rtl("default", 1, 240)
    rows, summary = validate.compare(model, rtl)
    bad = [row for row in rows if row[3] != row[4] or row[8]]
    assert summary["mismatched_bytes"] == 0 and summary["status_mismatches"] == 0, bad[:5]
    assert summary["n"] >= 200
    assert summary["median"] <= 2.0, summary
    assert summary["worst"] <= 5.0, sorted(rows, key=lambda r: -abs(r[7]))[:5]

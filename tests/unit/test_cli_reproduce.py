"""`plora reproduce`'s printed table and claims.csv (serving/reproduce.py) on claims built
here (no sweep runs): every printed line fits 120 columns, the CSV holds each claim's whole
text and the printed figures; and a run too small for the claims is one `Error:` line."""
import csv

import numpy as np
import pytest
from click.testing import CliRunner

from serving.claims import Claim
from plora_cli import main
from serving.reproduce import ReproduceError, knee, print_table, saturation_gb_s, write_claims_csv

LONG = ("per cell " + ", ".join(f"llama2-{n}b uniform-long {n / 7:.2f}" for n in range(1, 200))
        + "; one layer 4000 GEMM + 300 LoRA us")


def table():
    return [
        Claim("llama2-7b short decode step at batch 32 (plateau)", 4.18, np.float64(6.2612), "ms", LONG),
        Claim("NSD over ND(E4), mean over the workloads", 1.10, 1.0512, "x", "per workload: " + LONG),
        Claim("PLoRA-NoCXL TPOT over PLoRA, dense models, least (llama2-13b uniform-long) and a claim name "
              "longer than its column", 4.0, 2.2567, "x", LONG, "note: " + LONG),
        Claim("cells where PLoRA has the lowest TPOT, of 12 (models x workloads)", 1.0, 8 / 12, "share", LONG,
              tolerance=0.0),
        Claim("uniform device-count knee at 128 GB/s", 4, 4, "devices", "tok/s by devices 1:10, 2:20",
              tolerance=0.0),
        Claim("long-KV throughput lost to 2000 ns one-way latency (vs 0 ns)", 2.6, 2.84123, "%", LONG,
              "what the roofline omits: " + LONG),
    ]


def test_printed_table_fits_120_columns_and_names_the_csv(tmp_path):
    claims = table()
    path = write_claims_csv(claims, tmp_path / "claims.csv")
    lines = []
    print_table(claims, lines.append, path)
    assert max(len(line) for line in lines) <= 120
    assert str(path) in lines[0]
    assert lines[-1] == "reproduction claims=6 within_10pct=3"
    # a numbered row per claim; misses and notes cut to one line each
    rows = [line for line in lines if line[:3].strip().isdigit()]
    assert [int(r[:3]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert sum(line.lstrip().startswith("why:") for line in lines) == 3
    assert sum(line.lstrip().startswith("note:") for line in lines) == 2
    # the long claim name wraps within its column: its row and the lines under it give it back whole
    wrapped = 0
    for number, claim in enumerate(claims):
        under = lines[lines.index(rows[number]) + 1:lines.index(rows[number + 1]) if number < 5 else -1]
        more = [line for line in under if not line.lstrip().startswith(("why:", "note:"))]
        assert all(line.startswith("     ") and len(line) <= 5 + 62 for line in more)
        assert " ".join([rows[number][5:5 + 62].strip()] + [m.strip() for m in more]) == claim.what
        wrapped += len(more)
    assert wrapped >= 2                                     # claims 3 and 4 are longer than the column
    assert len(lines) == 2 + 6 + wrapped + 3 + 2 + 1        # header lines, rows, wrapped names, why, notes, last


def test_csv_holds_the_whole_text_and_the_printed_figures(tmp_path):
    claims = table()
    path = write_claims_csv(claims, tmp_path / "claims.csv")
    lines = []
    print_table(claims, lines.append, path)
    assert "np.float64" not in path.read_text()                 # numbers as numbers, whatever their type
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["number", "claim", "paper_value", "sim_value", "unit", "ratio_sim_over_paper",
                             "band_frac", "within_band", "verdict", "why", "note"]
    assert len(rows) == len(claims)
    printed = {int(line[:3]): line for line in lines if line[:3].strip().isdigit()}
    for row, claim in zip(rows, claims):
        assert row["claim"] == claim.what and row["why"] == claim.why and row["note"] == claim.note
        assert row["unit"] == claim.unit
        line = printed[int(row["number"])]
        paper, sim, unit, ratio, verdict = line[5 + 62:].split(None, 4)
        assert paper == f"{float(row['paper_value']):.3g}" and sim == f"{float(row['sim_value']):.3g}"
        assert ratio == f"{float(row['ratio_sim_over_paper']):.3f}"
        assert float(row["sim_value"]) / float(row["paper_value"]) == pytest.approx(float(row["ratio_sim_over_paper"]))
        assert unit == row["unit"] and verdict == row["verdict"]
        assert row["within_band"] == str(abs(float(row["ratio_sim_over_paper"]) - 1) <= float(row["band_frac"]) + 1e-12)
    assert [r["verdict"] for r in rows] == ["miss", "within 10%", "miss", "miss", "exact", "within 10%"]


def _ladder(tok_s):
    return [dict(model="llama2-7b", workload="uniform", link_gb_s=g, full_batch_tok_s=t, max_batch=32, requests=8,
                 num_devices=g) for g, t in zip((8.0, 16.0, 32.0), tok_s)]


def test_no_full_batch_is_a_clear_error():
    nan = float("nan")
    assert saturation_gb_s(_ladder([100.0, 200.0, 199.0])) == 16.0
    assert knee(_ladder([100.0, 200.0, 199.0])) == 16
    for read in (saturation_gb_s, knee):
        with pytest.raises(ReproduceError, match=r"no run of llama2-7b uniform has a decode step at a full batch "
                                                 r"\(max_batch=32, 8 requests a run\)"):
            read(_ladder([nan, nan, nan]))


def one_error_line(result, *named):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in result.output, result.output
    for text in named:
        assert text in lines[0], (text, lines[0])


def test_too_few_requests_is_one_line_before_any_run(tmp_path):
    out = tmp_path / "r"
    result = CliRunner().invoke(main, ["reproduce", "--requests", "8", "--out", str(out)])
    one_error_line(result, "--requests 8", "max_batch=32", "--requests 32 or more", "--set max_batch=8")
    result = CliRunner().invoke(main, ["reproduce", "--requests", "2", "--set", "max_batch=2", "--out", str(out)])
    one_error_line(result, "--requests 2", "4-GPU S-LoRA", "--requests 4 or more")
    one_error_line(CliRunner().invoke(main, ["reproduce", "--requests", "0"]), "--requests", "0")
    assert not out.exists()


def test_an_error_after_the_runs_is_one_line(tmp_path, monkeypatch):
    import serving.reproduce as rep

    def fails(*args, **kwargs):
        raise ReproduceError("the saturation bandwidth: no run ...")
    monkeypatch.setattr(rep, "reproduce", fails)
    result = CliRunner().invoke(main, ["reproduce", "--out", str(tmp_path)])
    assert result.exit_code == 1 and result.output == "Error: the saturation bandwidth: no run ...\n"

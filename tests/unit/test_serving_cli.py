"""The serving commands of `plora` (serving.cli) through click's CliRunner: the systems
list, one simulation and its three files, errors naming what is wrong, and one sweep on a
local Dask cluster."""
import csv
import json
import math

import pytest
from click.testing import CliRunner

from serving.cli import main
from serving.config import load_system_config, system_names

pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use")


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_systems_lists_every_system_config():
    result = invoke("systems")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    names = system_names()
    assert len(lines) == len(names) >= 11
    for line, name in zip(lines, names):
        assert line.split()[0] == name
        assert line.endswith(load_system_config(name).description)


def test_simulate_writes_three_files_and_prints_the_summary(tmp_path):
    out = tmp_path / "run"
    result = invoke("simulate", "--set", "requests=8", "--set", "max_batch=4", "--out", str(out))
    assert result.exit_code == 0, result.output
    printed = {}
    for line in result.output.splitlines():
        if line.startswith("wrote "):
            continue
        key, _, value = line.partition(" ")
        printed[key] = value.strip()
    summary = json.loads((out / "summary.json").read_text())
    assert set(printed) == set(summary)
    assert (summary["requests"], summary["max_batch"], summary["system"]) == (8, 4, "plora")
    for key, value in summary.items():
        if isinstance(value, float) and not math.isnan(value):
            assert float(printed[key]) == pytest.approx(value, rel=1e-5)
    with (out / "requests.csv").open() as f:
        requests = list(csv.DictReader(f))
    with (out / "steps.csv").open() as f:
        steps = list(csv.DictReader(f))
    assert len(requests) == 8 and len(steps) == summary["steps"]
    # every output token is in some step's row
    assert sum(int(r["requests_count"]) for r in steps) == sum(int(r["output_tokens"]) for r in requests)
    assert f"wrote {out}/steps.csv" in result.output


def test_simulate_without_out_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("simulate", "--set", "requests=2", "--set", "system=s-lora")
    assert result.exit_code == 0 and "decode_tok_s" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,named", [
    (("simulate", "--set", "bogus=1"), "bogus"),
    (("simulate", "--set", "max_batch=0"), "max_batch"),
    (("simulate", "--set", "system=no-such-system"), "no-such-system"),
    (("simulate", "--config", "no-such-run"), "no-such-run"),
    (("simulate", "--set", "requests"), "requests"),
    (("sweep", "--axis", "nonsense=1,2"), "nonsense"),
    (("sweep", "--axis", "link_gb_s"), "link_gb_s"),
    (("sweep", "--set", "bogus=1", "--axis", "link_gb_s=8"), "bogus"),
])
def test_errors_exit_non_zero_naming_the_culprit(args, named, tmp_path):
    result = CliRunner().invoke(main, [*args] + (["--out", str(tmp_path / "x.csv")] if args[0] == "sweep" else []))
    assert result.exit_code != 0
    assert named in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.csv").exists()


def test_sweep_writes_a_row_per_point(tmp_path):
    out = tmp_path / "sweep.csv"
    result = invoke("sweep", "--axis", "link_gb_s=64,128", "--set", "requests=8", "--workers", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    assert [r["axis_link_gb_s"] for r in rows] == ["64", "128"]
    assert [float(r["link_gb_s"]) for r in rows] == [64.0, 128.0]
    assert all(r["requests_count"] == "8" and r["system"] == "plora" for r in rows)
    assert float(rows[0]["decode_tok_s"]) <= float(rows[1]["decode_tok_s"])
    assert "link_gb_s=64" in result.output and "link_gb_s=128" in result.output

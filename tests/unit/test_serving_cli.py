"""The serving commands of `plora` (plora_cli) through click's CliRunner: the systems
list, one simulation and its three files, errors naming what is wrong, and one sweep on a
local Dask cluster."""
import csv
import json
import math

import pytest
from click.testing import CliRunner

from plora_cli import main
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
    # the summary is on stdout; progress bars, and the device-timing tables' measuring on a
    # cold cache, go to stderr (a busy machine's run once mixed them into `output`)
    for line in result.stdout.splitlines():
        line = line.rsplit("\r", 1)[-1]         # a progress bar (a run over 3 s, on a busy machine) clears its line
        if line.startswith("wrote ") or not line:
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
    plot = tmp_path / "plots" / "sweep.png"
    result = invoke("sweep", "--axis", "link_gb_s=64,128", "--set", "requests=8", "--workers", "1", "--out", str(out),
                    "--plot", str(plot))
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    assert [r["axis_link_gb_s"] for r in rows] == ["64", "128"]
    assert [float(r["link_gb_s"]) for r in rows] == [64.0, 128.0]
    assert all(r["requests_count"] == "8" and r["system"] == "plora" for r in rows)
    assert float(rows[0]["decode_tok_s"]) <= float(rows[1]["decode_tok_s"])
    assert "link_gb_s=64" in result.output and "link_gb_s=128" in result.output
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert f"wrote {plot}" in result.output.splitlines()


def _sweep_rows():
    """Rows as `plora sweep --axis link_gb_s=8,128,1800 --axis system=plora,ns` returns them."""
    rows = []
    for system, scale in (("plora", 1.0), ("ns", 0.5)):
        for gbs in (8, 128, 1800):
            rows.append(dict(system=system, model="llama2-7b", workload="uniform", num_devices=4, link_gb_s=gbs,
                             throughput_tok_s=scale * 100 * gbs ** 0.3, tpot_ms=10 / scale / gbs ** 0.3,
                             link_util=min(1.0, 16 / gbs), axis_link_gb_s=gbs, axis_system=system))
    return rows


def _drawn(monkeypatch, draw):
    """The figure `draw()` makes, kept from plt.close and drawn."""
    import matplotlib.pyplot as plt
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    path = draw()
    assert path.stat().st_size > 0
    fig, = figures
    fig.canvas.draw()
    return fig


def test_sweep_plot_axes_units_and_legend_outside(tmp_path, monkeypatch):
    from serving.figures import sweep_plot
    rows = _sweep_rows()
    fig = _drawn(monkeypatch, lambda: sweep_plot(rows, ["link_gb_s", "system"], tmp_path / "s.png"))
    assert len(fig.axes) == 3
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert "tokens/s" in labels[0] and "higher is better" in labels[0]
    assert "ms" in labels[1] and "lower is better" in labels[1]
    assert "%" in labels[2]
    for ax in fig.axes:
        assert ax.get_xlabel() == "link bandwidth (GB/s)" and ax.get_xscale() == "log"
        # a line per system, its points the rows' values
        lines = ax.get_lines()
        assert len(lines) == 2
        assert [list(line.get_xdata()) for line in lines] == [[8, 128, 1800]] * 2
    assert list(fig.axes[0].get_lines()[1].get_ydata()) == [r["throughput_tok_s"] for r in rows[3:]]
    assert list(fig.axes[2].get_lines()[0].get_ydata()) == [100 * r["link_util"] for r in rows[:3]]
    legend, = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["system=PLoRA (NSD)", "system=NS"]
    for ax in fig.axes:
        assert not legend.get_window_extent().overlaps(ax.get_window_extent())
    title = fig._suptitle.get_text()
    assert "llama2-7b" in title and "uniform" in title and "PLoRA" not in title


def test_sweep_plot_of_a_name_axis_is_bars(tmp_path, monkeypatch):
    from serving.figures import sweep_plot
    rows = [r for r in _sweep_rows() if r["link_gb_s"] == 128]
    fig = _drawn(monkeypatch, lambda: sweep_plot(rows, ["system"], tmp_path / "s.svg"))
    heights = [p.get_height() for p in fig.axes[1].patches]
    assert heights == [r["tpot_ms"] for r in rows]
    assert fig.axes[0].get_xlabel() == "system"
    assert not fig.legends                                   # one series: nothing to tell apart


def test_boost_is_a_plora_command_and_make_boost_runs_it():
    text = invoke("boost", "--help").output
    for option in ("--requests", "--pool-requests", "--instances"):
        assert option in text
    assert "boost" in invoke("--help").output
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "plora_cli", "boost", "--instances", "0"],     # as make boost
                          capture_output=True, text=True)
    assert done.returncode == 2, done
    line, = done.stderr.splitlines()
    assert line == ("Error: Invalid value for '--instances': 0 is not in the range x>=1. "
                    "(see 'python -m plora_cli boost --help')") and done.stdout == ""

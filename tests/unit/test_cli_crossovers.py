"""`plora crossovers --csv PATH --plot PATH` with click's CliRunner: the CSV holds every
cost the printed table shows (the same values at its batches, '-' where a strategy cannot
run), its crossovers agree with the printed 'E2 beats E3 from batch N' lines, and the plot
is an image with its legend outside the panels."""
import csv
import math
import re

import pytest
from click.testing import CliRunner

from plora_cli import main

MAX_BATCH = 16


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("crossovers")
    csv_path, png_path = folder / "sub" / "costs.csv", folder / "costs.png"
    result = CliRunner().invoke(main, ["crossovers", "--max-batch", str(MAX_BATCH), "--csv", str(csv_path),
                                       "--plot", str(png_path)])
    assert result.exit_code == 0, (result.output, result.exception)
    with csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return result.output.splitlines(), rows, png_path


def printed_tables(lines):
    """{(rank, state, strategy): {batch: text}} from the printed tables."""
    tables, rank, batches = {}, None, None
    for line in lines:
        if re.fullmatch(r"R = \d+", line):
            rank = int(line.split()[-1])
        elif line.startswith("  state "):
            batches = [int(b[2:]) for b in line.split()[2:]]
        elif rank and re.match(r"^  P\d +E\d", line):
            state, strategy, *cells = line.split()
            assert len(cells) == len(batches), line
            tables[(rank, state, strategy)] = dict(zip(batches, cells))
    return tables


def test_csv_has_units_and_every_batch(run):
    lines, rows, _ = run
    assert list(rows[0]) == ["rank", "state", "strategy", "charged_load", "d_model", "batch_count", "cost_us"]
    tables = printed_tables(lines)
    n = int(re.search(r"crossovers n=(\d+) ", "\n".join(lines))[1])
    assert len(tables) == n == 60
    assert len(rows) == n * MAX_BATCH
    keys = {(int(r["rank"]), r["state"], r["strategy"]) for r in rows}
    assert keys == set(tables)
    for r in rows:
        assert r["d_model"] == "4096"
        assert r["charged_load"] == str(r["strategy"].endswith("+load"))
        assert 1 <= int(r["batch_count"]) <= MAX_BATCH


def test_csv_values_are_the_printed_ones(run):
    lines, rows, _ = run
    tables = printed_tables(lines)
    checked = 0
    for r in rows:
        cell = tables[(int(r["rank"]), r["state"], r["strategy"])].get(int(r["batch_count"]))
        if cell is None:
            continue                                 # a batch the table does not show
        if cell == "-":
            assert r["cost_us"] == ""
        else:
            assert f"{float(r['cost_us']):.2f}" == cell
            checked += 1
    assert checked > 60 * 4


def test_csv_crossovers_match_the_printed_lines(run):
    """'E2 beats E3 from batch N, E4 from batch M' per rank: the first batch where the CSV's
    P2 E2 costs less than P2 E3 (P3 E2 than P3 E4)."""
    lines, rows, _ = run
    cost = {(int(r["rank"]), r["state"], r["strategy"], int(r["batch_count"])):
            float(r["cost_us"]) if r["cost_us"] else math.inf for r in rows}
    ranks = sorted({k[0] for k in cost})

    def first(rank, state, cheaper, than):
        return next((b for b in range(1, MAX_BATCH + 1)
                     if cost[(rank, state, cheaper, b)] < cost[(rank, state, than, b)]), None)

    printed = [re.fullmatch(r"  E2 beats E3 from batch (\w+), E4 from batch (\w+)", line) for line in lines]
    printed = [m.groups() for m in printed if m]
    assert len(printed) == len(ranks)
    for rank, (e3, e4) in zip(ranks, printed):
        assert str(first(rank, "P2", "E2", "E3")) == e3
        assert str(first(rank, "P3", "E2", "E4")) == e4


def test_plot_is_a_png_with_the_panels(run):
    _, _, png = run
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    import matplotlib.image
    height, width, _ = matplotlib.image.imread(png).shape
    assert width > height > 400                         # 5 ranks across, 3 states down


def test_plot_legend_is_outside_the_panels_and_axes_say_units(tmp_path, monkeypatch):
    from scheduler import crossovers as xo
    from scheduler.config import load_scheduler_config
    from scheduler.device_timing import DeviceTiming
    import matplotlib.pyplot as plt

    config = load_scheduler_config("default")
    rows = []
    xo.crossovers(config, DeviceTiming(config.device_config()), out=lambda *_: None, max_batch=8, ranks=(8, 16),
                  rows_out=rows)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    path = xo.plot_rows(rows, tmp_path / "x.svg", 4096, config)
    assert path.stat().st_size > 0
    fig, = figures
    fig.canvas.draw()
    legend, = fig.legends
    box = legend.get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent())
        assert ax.get_yscale() == "log"
    assert all(ax.get_xlabel() == "batch (requests)" for ax in fig.axes[-2:])
    assert "cost (us per layer)" in fig.axes[0].get_ylabel()
    assert "lower is better" in fig._suptitle.get_text()
    assert len(fig.axes) == 3 * 2

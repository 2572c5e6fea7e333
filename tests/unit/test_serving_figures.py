"""The reproduction's figures (serving.figures, Figs. 8, 9, 11, 12, 13) drawn from rows shaped
like the sweeps': every legend clear of every panel, panels lettered (a), (b), ... in order,
every axis labelled with its unit, every value axis saying which way is better, no tick
written as a power (6x10^0), and the hardware every row shares in the title."""
import itertools
import re

import pytest

from serving import figures

HW = dict(gpu="h100", link="cxl3.1", link_gb_s=128.0, device="paper", num_devices=4, max_batch=32)
MODELS = ("llama2-7b", "llama2-13b", "llama3-8b")
WORKLOADS = ("lmsys", "uniform", "uniform-long")
SYSTEMS = ("plora", "plora-nocxl", "s-lora")
ABLATIONS = ("plora", "ns", "nd-e3", "nd-e4", "n-e3", "n-e4")


def fig8_rows():
    return [dict(HW, model=m, workload=w, system=s, tpot_ms=4.0 + 3 * i + j + 20 * (s == "plora-nocxl"))
            for i, m in enumerate(MODELS) for j, w in enumerate(WORKLOADS) for s in SYSTEMS
            if not (s == "s-lora" and m == "llama3-8b")]


def fig9_rows():
    return [dict(HW, model="llama2-7b", workload=w, system=s, throughput_tok_s=3000.0 - 100 * k)
            for w in WORKLOADS for k, s in enumerate(ABLATIONS)]


def fig11_rows():
    breakdown = [dict(HW, model="llama2-7b", workload="uniform-long", system=s, breakdown=True,
                      layer_gemm_us=124.0, layer_lora_us=10.0 + k, layer_attention_us=150.0 + 30 * k,
                      layer_launch_us=0.0, kv_dup_frac=0.5)
                 for k, s in enumerate(("plora", "nd-e3", "n-e3", "pure-cxl"))]
    kv = [dict(HW, model=m, workload=w, system="plora", kv_panel=True, kv_dup_frac=0.3 + 0.1 * i + 0.05 * j)
          for i, m in enumerate(MODELS) for j, w in enumerate(WORKLOADS)]
    return breakdown + kv


def fig13_rows():
    ladder = [dict(HW, system=s, model=m, workload=w, link_gb_s=g, throughput_tok_s=min(g * 20, 3000.0) / (1 + k))
              for k, (s, m, w) in enumerate(itertools.product(("plora", "plora-nocxl"), MODELS[:2], WORKLOADS[1:]))
              for g in (8, 16, 32, 64, 128, 256, 450, 900, 1800)]
    devices = [dict(HW, system="plora", model="llama2-7b", workload=w, link_gb_s=g, num_devices=n,
                    throughput_tok_s=3000.0 + n)
               for w in WORKLOADS[1:] for g in (128.0, 450.0) for n in (1, 2, 4, 8, 16, 32, 64)]
    latency = [dict(HW, system="plora", model="llama2-7b", workload=w, link_latency_ns=ns,
                    throughput_tok_s=3000.0 - ns / 10)
               for w in WORKLOADS[1:] for ns in (0, 50, 100, 200, 500, 1000, 2000)]
    return ladder, devices, latency


DRAWINGS = {
    "fig8": (lambda path: figures.fig8_tpot(fig8_rows(), path), 3, False),
    "fig9": (lambda path: figures.fig9_ablation(fig9_rows(), path), 1, False),
    "fig11": (lambda path: figures.fig11_breakdown(fig11_rows(), path), 2, True),
    "fig12": (lambda path: figures.fig12_saturation([(m, w, 128) for m in MODELS[:2] for w in WORKLOADS[1:]], path,
                                                    setup=figures.setup_text([HW])), 1, False),
    "fig13": (lambda path: figures.fig13_link(*fig13_rows(), path), 3, True),
}


@pytest.fixture(scope="module", params=sorted(DRAWINGS))
def drawn(request, tmp_path_factory):
    """Each figure drawn once for the module's checks, kept from plt.close until they end."""
    import matplotlib.pyplot as plt
    draw, panels, lettered = DRAWINGS[request.param]
    close, kept = plt.close, []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plt, "close", kept.append)
        path = draw(tmp_path_factory.mktemp("figures") / f"{request.param}.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig, = kept
    fig.canvas.draw()
    yield request.param, fig, panels, lettered
    close(fig)


def test_legends_clear_of_every_panel(drawn):
    name, fig, _, _ = drawn
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends, name
    renderer = fig.canvas.get_renderer()
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (name, [t.get_text() for t in legend.get_texts()])


def test_panels_lettered_in_order(drawn):
    name, fig, panels, lettered = drawn
    assert len(fig.axes) == panels
    titles = [ax.get_title() for ax in fig.axes]
    if panels > 1 or lettered:
        assert [t[:3] for t in titles] == [f"({chr(ord('a') + i)})" for i in range(panels)], (name, titles)


UNIT = re.compile(r"\([^()]*?(?:\bms\b|µs|\bus\b|GB/s|\bns\b|%|tokens/s|\bcount\b|\bx\b)[^()]*\)")


def test_axes_labelled_with_units_and_which_way_is_better(drawn):
    name, fig, _, _ = drawn
    for ax in fig.axes:
        ylabel = ax.get_ylabel() or fig.axes[0].get_ylabel()        # fig8's panels share the first's
        assert UNIT.search(ylabel), (name, ylabel)
        assert re.search(r"(lower|higher) is better|not a score", ylabel), (name, ylabel)
        xlabel = ax.get_xlabel()
        assert xlabel, (name, ax.get_title())
        numeric = any(t.get_text().replace(".", "").isdigit() for t in ax.get_xticklabels())
        assert not numeric or UNIT.search(xlabel), (name, xlabel)


def test_no_tick_written_as_a_power(drawn):
    name, fig, _, _ = drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_ticklabels(which="both"):
                assert "times" not in tick.get_text() and "^" not in tick.get_text(), (name, tick.get_text())


def test_the_title_names_the_hardware(drawn):
    name, fig, _, _ = drawn
    titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [ax.get_title() for ax in fig.axes]
    assert any("GPU h100" in t and "paper devices" in t for t in titles), (name, titles)


def test_setup_text_names_only_what_every_row_shares():
    assert figures.setup_text([HW]) == "GPU h100, link cxl3.1 128 GB/s, 4 x paper devices, batch 32"
    rows = [dict(HW, link_gb_s=8.0), dict(HW, num_devices=8)]
    assert figures.setup_text(rows) == "GPU h100, link cxl3.1, paper devices, batch 32"
    assert figures.setup_text([dict(HW, link="pcie5"), HW]) == "GPU h100, 4 x paper devices, batch 32"


def test_reproduce_names_its_setup_second_and_the_sweep_what_every_point_shares():
    from plora_cli.serving import _shared
    from serving.config import load_serving_config
    from serving.reproduce import print_table, setup_line
    lines = []
    print_table([], lines.append, "claims.csv", setup_line(load_serving_config("default")))
    assert lines[1] == ("setup: GPU h100, link cxl3.1 (128 GB/s, 200 ns), 4 x paper devices, batch 32, "
                        "unless the claim varies it")
    assert lines[-1] == "reproduction claims=0 within_10pct=0"
    rows = [dict(HW, system=s, model="llama2-7b", workload="uniform", link_gb_s=g) for s in ("plora", "ns")
            for g in (8.0, 128.0)]
    assert _shared(rows) == "model llama2-7b, workload uniform, GPU h100, link cxl3.1, 4 x paper devices, batch 32"

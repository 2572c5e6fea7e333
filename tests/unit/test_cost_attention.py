"""scheduler.cost's attention round (Table V) priced as the devices run it: one paged
ATTENTION per request, KV head and device over the pages the GPU does not hold (one per
page list where a share spans more than one), its period and drain from the timing tables'
`attention_share`, one partial (O, m, l) per share over the link; per page where the KV
cache keeps the unpaged layout. Every expected number is written out here from
scheduler.device_timing and the link and GPU configs, for small hand-made batches."""
import math

import pytest

from scheduler.config import load_scheduler_config
from scheduler.cost import CostModel
from scheduler.device_timing import DeviceTiming

D = 128
OUT = 64 + 1 * D * 2                 # a descriptor line and one query row (rows = 1: MHA)
BACK = 64 + 1 * D * 4 + 64           # its completion line, O in FP32 and the row's (m, l) line


@pytest.fixture(scope="module")
def config():
    return load_scheduler_config()


@pytest.fixture(scope="module")
def timing(config):
    return DeviceTiming(config.device_config())


def cost_model(config, timing, devices, page, **knobs):
    return CostModel(config.gpu_config(), config.link_config(), timing, devices, page_tokens=page, **knobs)


def share(timing, t, rows=1, page=128):
    """(period, drain) of one paged ATTENTION of t tokens in pages of `page`."""
    return timing.stream("attention_share", rows, D, page, t)


def pool_s(link, load):
    """scheduler/rounds.py's three paths, written out for one round of equal descriptors."""
    w = link.transfer_s
    devices = max(w(OUT) + b + d + w(BACK) for b, d in zip(load.busy, load.drain) if b)
    return link.round_trip_s + max(devices, w(load.descriptors * OUT) + load.run_s + w(BACK),
                                   w(OUT) + load.run_s + w(load.descriptors * BACK))


def test_one_paged_descriptor_per_request_head_share(config, timing):
    """4 devices, pages of 128 tokens, 32 heads: request 0 of 1,000 tokens (250 a device:
    pages of 128 and 122), request 1 of 3,000 (750 a device: 5 x 128 and 110). Each device
    runs one share per request and head: its busy time the sum of the shares' periods, its
    drain the last share's; one partial per share comes back."""
    link, gpu = config.link_config(), config.gpu_config()
    cost = cost_model(config, timing, 4, 128)
    assert cost.lists_pages(D) == 64
    ctx, heads = [1000, 3000], 32
    none, gpu_bytes = cost.attention_load(ctx, [0, 1], [0, 0], heads, heads, D)
    p = {t: share(timing, t) for t in (250, 750, 122, 622, 494)}
    busy = heads * (p[250][0] + p[750][0])
    assert gpu_bytes == 0 and none.gpu_s == 0
    assert none.busy == pytest.approx([busy] * 4, rel=1e-12)
    assert none.drain == pytest.approx([p[750][1]] * 4, rel=1e-12)
    assert none.descriptors == 4 * 2 * heads                  # not 4 x 8 pages x heads
    assert (none.to_device, none.to_gpu) == (none.descriptors * OUT, none.descriptors * BACK)
    assert none.first_out == [OUT] * 4 and none.last_in == [BACK] * 4 and none.reads == 0
    assert none.run_s == pytest.approx(min(sum(p[250]), sum(p[750])), rel=1e-12)
    assert none.pool_s(link) == pytest.approx(pool_s(link, none), rel=1e-12)
    merge = none.descriptors * (BACK - 64) / gpu.hbm_bytes_per_s
    assert none.seconds(link) == pytest.approx(pool_s(link, none) + merge, rel=1e-12)
    # the per-page price (one ATTENTION per page) is another number: the test can tell them apart
    page = {t: timing.stream("attention", 1, D, t)[0] for t in (128, 122, 110)}
    assert abs(busy - heads * (6 * page[128] + page[122] + page[110])) > 0.05 * busy

    # request 0 holds 1 unit (its page 0 on device 0): device 0's share of it starts at page 1
    one, gpu_bytes = cost.attention_load(ctx, [0, 1], [1, 0], heads, heads, D)
    assert gpu_bytes == 128 * 2 * heads * D * 2
    assert one.gpu_s == pytest.approx(gpu.roofline_s(4 * heads * D * 128, gpu_bytes), rel=1e-12)
    assert one.busy[0] == pytest.approx(heads * (p[122][0] + p[750][0]), rel=1e-12)
    assert one.busy[1:] == none.busy[1:] and one.descriptors == none.descriptors

    # request 0 holds page 0 on devices 0, 1, 2; request 1 (its order from device 1) page 0
    # on devices 1, 2, 3, 0 and page 1 on device 1
    some, _ = cost.attention_load(ctx, [0, 1], [3, 5], heads, heads, D)
    shares = [(122, 622), (122, 494), (122, 622), (250, 622)]
    assert some.busy == pytest.approx([heads * (p[a][0] + p[b][0]) for a, b in shares], rel=1e-12)
    assert some.drain == pytest.approx([p[b][1] for _, b in shares], rel=1e-12)
    assert some.descriptors == 4 * 2 * heads and some.to_gpu == some.descriptors * BACK
    assert some.run_s == pytest.approx(min(sum(p[t]) for t in (122, 250, 494, 622)), rel=1e-12)

    every, gpu_bytes = cost.attention_load(ctx, [0, 1], [8, 24], heads, heads, D)
    assert every.pool_s(link) == 0 and every.descriptors == 0 and gpu_bytes == 4000 * 2 * heads * D * 2


def test_a_share_longer_than_a_list_is_one_descriptor_per_list(config, timing):
    """One device, 9,000 tokens: 70 pages of 128 and one of 40, so two lists (64 pages, then
    7). Holding 3 pages, the device runs pages 3..63 (7,808 tokens: the share's first list,
    from its skip list) and 64..70 (808 tokens) per head: two descriptors, two partials."""
    cost = cost_model(config, timing, 1, 128)
    load, _ = cost.attention_load([9000], [0], [3], 2, 2, D)
    first, last = share(timing, 61 * 128), share(timing, 6 * 128 + 40)
    assert load.busy[0] == pytest.approx(2 * (first[0] + last[0]), rel=1e-12)
    assert load.drain[0] == pytest.approx(last[1], rel=1e-12)
    assert load.descriptors == 2 * 2 and load.to_gpu == load.descriptors * BACK


def test_gqa_rows_and_a_lower_kv_precision(config, timing):
    """A GQA group of 4 query rows per KV head prices the share at 4 rows; INT8 KV (kv_scale
    0.5) reads half the bytes: a one-row share of half the tokens, plus what the other rows
    add at the full count."""
    link = config.link_config()
    ctx = [2000]                    # 500 tokens a device: pages of 128 x 3 and 116
    fp16, _ = cost_model(config, timing, 4, 128).attention_load(ctx, [0], [0], 32, 8, D)
    rows4 = share(timing, 500, rows=4)
    assert fp16.busy == pytest.approx([8 * rows4[0]] * 4, rel=1e-12) and fp16.descriptors == 4 * 8
    assert fp16.to_gpu == fp16.descriptors * (64 + 4 * D * 4 + 4 * 64)      # O, then an anchor line a row
    int8, _ = cost_model(config, timing, 4, 128, kv_scale=0.5).attention_load(ctx, [0], [0], 32, 8, D)
    period = share(timing, 250)[0] + rows4[0] - share(timing, 500)[0]
    assert int8.busy == pytest.approx([8 * period] * 4, rel=1e-12)
    assert int8.drain == pytest.approx([rows4[1]] * 4, rel=1e-12)
    assert int8.pool_s(link) < fp16.pool_s(link)


def test_an_unpaged_layout_is_priced_per_page(config, timing):
    """Pages of 48 tokens (not a power of two: the KV cache keeps one ATTENTION operand per
    page): each device runs one ATTENTION per request, head and page (100 tokens a device:
    48, 48, 4), as before the paged share."""
    cost = cost_model(config, timing, 4, 48)
    assert cost.lists_pages(D) is None and cost_model(config, timing, 4, 16).lists_pages(64) is None
    load, _ = cost.attention_load([400], [0], [1], 2, 2, D)
    page = {t: timing.stream("attention", 1, D, t) for t in (48, 4)}
    full = 2 * (2 * page[48][0] + page[4][0])
    assert load.busy[1:] == pytest.approx([full] * 3, rel=1e-12)
    assert load.busy[0] == pytest.approx(2 * (page[48][0] + page[4][0]), rel=1e-12)     # page 0 held
    assert load.drain == pytest.approx([page[4][1]] * 4, rel=1e-12)
    assert load.descriptors == 2 * (2 + 3 * 3) and load.to_gpu == load.descriptors * BACK
    assert math.isfinite(load.run_s)

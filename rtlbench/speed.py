"""The model's speed on a long stream of small descriptors: `python -m rtlbench.speed`.

A decode step replayed descriptor by descriptor is mostly ATTENTION descriptors of one
query row (head_dim 128) over one KV page each, on the devices of a pool sharing one
simulated clock. This runs such a stream through driver.pool on `--devices` model
devices (`--tokens` tokens a page, `--per-device` descriptors each; the queues filled,
then drained with as_completed, again until done) and prints

    speed descriptors=<n> wall_s=<s> simulated_us=<us> descriptors_per_s=<rate> mode=<full|timing>

`--timing-only` runs timing-only models (sim/device.py NdpModel(compute_results=False)).
The wall time is the stream's, from the first submission to the last completion: the
model's and the host driver's work both.
"""
import argparse
import time

import numpy as np

import isa
from driver import DevicePool
from driver.clock import run
from isa.encoders import attention_descriptor

HEAD_DIM = 128


async def stream(cfg, devices, tokens, per_device, compute_results):
    """(descriptors completed, wall seconds, simulated seconds) of the stream."""
    pool = await DevicePool.model(cfg, devices, compute_results=compute_results, log2_depth=6, log2_slot=12)
    pages = [await pool.upload_kv(d, np.zeros((tokens, HEAD_DIM), np.float16),
                                  np.zeros((tokens, HEAD_DIM), np.float16)) for d in range(devices)]
    items = [(d, attention_descriptor(pages[d], 1), b"") for _ in range(per_device) for d in range(devices)]
    room = devices * len(pool.devices[0].queues) * (1 << 6)        # every slot of every queue
    start, simulated, done = time.perf_counter(), pool.clock.now, 0
    for first in range(0, len(items), room):
        tickets = await pool.submit_many(items[first:first + room])
        async for _ in pool.as_completed(tickets):
            done += 1
    return done, time.perf_counter() - start, pool.clock.now - simulated


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="paper")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--per-device", type=int, default=500)
    parser.add_argument("--timing-only", action="store_true")
    args = parser.parse_args(argv)
    done, wall, simulated = run(stream(isa.load_config(args.config), args.devices, args.tokens, args.per_device,
                                       not args.timing_only))
    print(f"speed descriptors={done} wall_s={wall:.3f} simulated_us={simulated * 1e6:.2f} "
          f"descriptors_per_s={done / wall:.0f} mode={'timing' if args.timing_only else 'full'}")
    return done / wall


if __name__ == "__main__":
    main()

"""`make validate`: the cycle model against the RTL on a random descriptor stream.

Runs the same stream through the driver on the model (sim/) and on the RTL (Verilator),
then compares, per descriptor, the result bytes and the status (both must match exactly)
and the cycles. Prints the error table, the error distribution, and ends with
    cycle error median=<percent>% worst=<percent>% n=<descriptors> mismatched_bytes=<count> config=<name>

The RTL runs on the cocotbext-axi bench (host data over CXL.mem) for a config whose DRAM
is that bench's RAM model (one channel, the 2-cycle latencies the model assumes), else
on the fast co-simulation path (one behavioural DRAM per channel at the config's
latencies, host data through the DRAM backdoor, so the model's host memory accesses take
no time there either); `--backend` chooses.

    python rtlbench/validate.py [--seed S] [--count N] [--config NAME] [--backend bfm|fast]
"""
import argparse
import asyncio
import json
import os
import pathlib
import statistics
import sys

from rtlbench import runner
from rtlbench import stream

import isa
from driver import NdpDevice
from driver.model_transport import ModelTransport


def default_backend(cfg):
    """The cocotbext-axi bench where its RAM model is the config's DRAM, else the fast path."""
    bfm = cfg.dram_channels == 1 and (cfg.dram_read_latency, cfg.dram_write_latency) == (2, 2)
    return "bfm" if bfm else "fast"


def run_model(cfg, seed, count, backend="bfm", batches=None):
    async def main():
        dev = await NdpDevice.open(ModelTransport(cfg, backdoor_memory=backend == "fast"))
        queues = await stream.configure(dev, cfg)
        return await stream.run(dev, queues, batches or stream.generate(seed, count, cfg), seed)
    return asyncio.run(main())


def run_rtl(config, seed, count, backend="bfm", batches=None):
    out = runner.BUILD / f"validate-{config}-{backend}-{seed}-{count}.json"
    run = runner.run if backend == "bfm" else runner.run_fast
    run("cocotb_validate", config=config,
        env={"VALIDATE_SEED": str(seed), "VALIDATE_COUNT": str(count), "VALIDATE_OUT": str(out),
             "VALIDATE_STREAM": stream.to_json(batches) if batches else "",
             "COCOTB_LOG_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    return json.loads(out.read_text())


def compare(model, rtl):
    """Per-descriptor rows and the summary: errors in percent of the RTL's cycles."""
    if len(model) != len(rtl):
        raise ValueError(f"the backends ran {len(model)} and {len(rtl)} descriptors")
    rows, mismatched_bytes, status_mismatches = [], 0, 0
    for i, (m, r) in enumerate(zip(model, rtl)):
        mb, rb = bytes.fromhex(m["result"]), bytes.fromhex(r["result"])
        differ = sum(a != b for a, b in zip(mb, rb)) + abs(len(mb) - len(rb))
        mismatched_bytes += differ
        status_mismatches += m["status"] != r["status"]
        error = 100.0 * (m["cycles"] - r["cycles"]) / max(r["cycles"], 1)
        rows.append((i, r["label"], r["queue"], r["status"], m["status"], r["cycles"], m["cycles"], error, differ))
    errors = [abs(row[7]) for row in rows]
    return rows, {"median": statistics.median(errors), "worst": max(errors), "n": len(rows),
                  "mismatched_bytes": mismatched_bytes, "status_mismatches": status_mismatches}


def report(rows, summary, config, out=sys.stdout):
    print(f"{'#':>4} {'descriptor':<22} {'q':>2} {'status rtl/model':<22} {'rtl cyc':>8} {'model':>8} "
          f"{'err %':>7} {'bytes':>5}", file=out)
    for i, label, q, rs, ms, rc, mc, err, differ in rows:
        status = rs if rs == ms else f"{rs}/{ms} !"
        print(f"{i:>4} {label:<22} {q:>2} {status:<22} {rc:>8} {mc:>8} {err:>+7.2f} {differ:>5}", file=out)
    edges = [0, 0.5, 1, 2, 5, 10, float("inf")]
    errors = [abs(row[7]) for row in rows]
    print("\n|cycle error| distribution:", file=out)
    for lo, hi in zip(edges, edges[1:]):
        count = sum(lo <= e < hi for e in errors) if lo else sum(e < hi for e in errors)
        print(f"  {'=' if not lo else '>='}{lo:<4}% .. <{hi}%: {count:>4} {'#' * (60 * count // len(errors))}",
              file=out)
    print(f"status mismatches: {summary['status_mismatches']}", file=out)
    print(f"cycle error median={summary['median']:.2f}% worst={summary['worst']:.2f}% n={summary['n']} "
          f"mismatched_bytes={summary['mismatched_bytes']} config={config}", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=240)
    parser.add_argument("--config", default="default")
    parser.add_argument("--backend", choices=("bfm", "fast"), help="the RTL's bench (default: see above)")
    parser.add_argument("--stream", type=pathlib.Path,
                        help="replay this stream (JSON batches of rtlbench/stream.py Items) instead")
    args = parser.parse_args(argv)
    cfg = isa.load_config(args.config)
    batches = stream.from_json(args.stream.read_text()) if args.stream else None
    return validate(cfg, args.config, args.seed, args.count, args.backend, batches)


def validate(cfg, config, seed=1, count=240, backend=None, batches=None):
    """Run the stream (`batches`, or `count` random descriptors from `seed`) on the model and
    on the RTL of device config `cfg` (named `config`, a name or path), print the comparison
    and return its summary; the entry point of `plora validate` and of main() above."""
    backend = backend or default_backend(cfg)
    model = run_model(cfg, seed, count, backend, batches)
    rtl = run_rtl(config, seed, count, backend, batches)
    rows, summary = compare(model, rtl)
    report(rows, summary, cfg.name)
    return summary


if __name__ == "__main__":
    main()

"""The soak: a long random descriptor stream over every queue with random stalls on every
AXI channel of the DRAM ports and on the register port (the fast path's DRAM model,
seeded), checked descriptor by descriptor against the model on the same stream: the same
status and the same result bytes (the model's results are sim/golden.py's, bit for bit),
each completion exactly once (one interrupt pulse per descriptor of its queue), in order
per queue (the driver takes completion `s` only with completion word `s`, and HEAD must
reach each batch's last)."""
import dataclasses
import time

import isa

from .rtl import model_stream_records, run_rtl


@dataclasses.dataclass
class SoakResult:
    count: int
    lost: int
    duplicated: int
    mismatched: int
    rtl_seconds: float
    cycles: int
    stalls: dict

    def line(self, config):
        stalls = " ".join(f"{k}={v}" for k, v in self.stalls.items())
        return (f"soak config={config} descriptors={self.count} lost={self.lost} duplicated={self.duplicated} "
                f"mismatched={self.mismatched} cycles={self.cycles} rtl_seconds={self.rtl_seconds:.1f} "
                f"stalls: {stalls}")


def compare(model, rtl, pulses, num_queues):
    """(lost, duplicated, mismatched): descriptors without a record, extra interrupt pulses,
    records whose status or result bytes differ from the model's."""
    lost = max(len(model) - len(rtl), 0)
    mismatched = sum(m["status"] != r["status"] or m["result"] != r["result"] or m["seq"] != r["seq"]
                     for m, r in zip(model, rtl))
    per_queue = [sum(r["queue"] == q for r in model) for q in range(num_queues)]
    duplicated = sum(max(p - n, 0) for p, n in zip(pulses, per_queue))
    lost += sum(max(n - p, 0) for p, n in zip(pulses, per_queue))
    return lost, duplicated, mismatched


def run(config="default", count=10_000, seed=1, backend="fast"):
    cfg = isa.load_config(config)
    started = time.time()
    rtl = run_rtl("soak", config, count, seed, backend)
    rtl_seconds = time.time() - started
    model = model_stream_records(cfg, seed, count)
    lost, duplicated, mismatched = compare(model, rtl["records"], rtl["pulses"], cfg.num_queues)
    return SoakResult(len(model), lost, duplicated, mismatched, rtl_seconds, rtl["cycles"], rtl["stalls"])

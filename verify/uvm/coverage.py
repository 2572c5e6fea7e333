"""Functional coverage (cocotb-coverage): descriptor fields and their crosses, every status
code, the corner shapes, the protocol events and back-pressure on each channel, sampled
from what the monitor saw cross the transport (each completion's descriptor and status, the
bus events) and from the driver's items (the faults and stalls it injected, which nothing
on the host side shows). GOALS names what a run must reach; `report` writes every point's
bins and the goals' outcome."""
import functools
import json

from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db
from pyuvm import ConfigDB, uvm_subscriber

from isa import DescType, Op, Status
from isa.descriptor import Flag

from .items import NdpItem
from .monitor import BusEvent, CompletionSeen

OPS = ["LOAD", "STORE", "GEMV", "GEMM", "SOFTMAX", "ATTENTION", "LORA_XAB", "reserved_type", "reserved_op"]
DTYPES = ["FP16", "BF16", "INT8", "reserved"]
FLAGS = ["none", "TRANS_W", "PARTIAL", "TRANS_W|PARTIAL", "other_bits"]
STATUSES = [s.name for s in Status]
SHAPES = ["1", "2..LANES-2", "LANES-1", "LANES", "LANES+1", "mid", "k_max", "over_k_max"]
N_SHAPES = ["1", "2..LANES-2", "LANES-1", "LANES", "LANES+1", "mid", "n_max", "over_n_max"]
PROTOCOL = ["doorbell_before_valid_word", "repeated_doorbell", "stale_doorbell", "sequence_wrap", "full_queue",
            "foreign_doorbell_refused", "foreign_config_refused", "foreign_mem_refused",
            "dram_read_slverr", "dram_read_decerr", "dram_write_slverr", "dram_write_decerr"]
CHANNELS = ["ar", "r", "aw", "w", "b"]

COMPUTE_OPS = {"GEMV", "GEMM", "SOFTMAX", "ATTENTION", "LORA_XAB"}
RESERVED = {"reserved_type", "reserved_op"}


def unreachable_op_status(bin_):
    """A reserved type or op is refused first, with BAD_OP: no other status for it; a page
    list, and so BAD_PAGE, belongs to a paged ATTENTION only."""
    op, status = bin_
    return (op in RESERVED and status != "BAD_OP") or (status == "BAD_PAGE" and op != "ATTENTION")


def unreachable_op_k(bin_):
    """Only the compute ops have a K (a LOAD or STORE none, a reserved one no meaning)."""
    return bin_[0] not in COMPUTE_OPS


# goal name -> (coverage item, every bin but those `excluded` says the rules make
# impossible must be hit at least once)
GOALS = {
    "every op": ("ndp.desc.op", None), "every dtype": ("ndp.desc.dtype", None),
    "every flag combination": ("ndp.desc.flags", None), "every status": ("ndp.status", None),
    "every queue": ("ndp.desc.queue", None), "K corner shapes": ("ndp.shape.k", None),
    "N corner shapes": ("ndp.shape.n", None), "op x status": ("ndp.op_x_status", unreachable_op_status),
    "op x K shape": ("ndp.op_x_k", unreachable_op_k), "op x queue": ("ndp.op_x_queue", None),
    "protocol events": ("ndp.protocol", None), "back-pressure on every channel": ("ndp.backpressure", None),
}


def op_name(desc):
    if desc.type == DescType.RESERVED:
        return "reserved_type"
    if desc.type in (DescType.LOAD, DescType.STORE):
        return DescType(desc.type).name
    return Op(desc.op).name if desc.op in {op.value for op in Op} else "reserved_op"


def dtype_name(desc):
    return DTYPES[desc.dtype] if desc.dtype < 3 else "reserved"


def flags_name(desc):
    if int(desc.flags) & ~int(Flag.TRANS_W | Flag.PARTIAL):     # ints: ~ of an IntFlag keeps its members' bits
        return "other_bits"
    return {0: "none", 1: "TRANS_W", 2: "PARTIAL", 3: "TRANS_W|PARTIAL"}[desc.flags]


def shape_class(value, lanes, limit, names):
    if value == 1:
        return names[0]
    if 2 <= value <= lanes - 2:
        return names[1]
    if value in (lanes - 1, lanes, lanes + 1):
        return names[2 + value - (lanes - 1)]
    if value == limit:
        return names[6]
    if value > limit:
        return names[7]
    return names[5]


def k_and_n(desc):
    """(K, N) of a compute descriptor's (first) product, None for LOAD/STORE and a zero dim."""
    if desc.type != DescType.READ_COMPUTE:
        return None
    if desc.op == Op.SOFTMAX:
        return desc.in_cols, desc.in_cols
    if desc.flags & Flag.TRANS_W and desc.op in (Op.GEMV, Op.GEMM, Op.ATTENTION):
        return desc.dev_cols, desc.dev_rows      # stored N x K (keys token-major: T x d)
    return desc.dev_rows, desc.dev_cols


def protocol_events(host_port):
    """The protocol bins of a backend: CXL.mem refusals only where the host's accesses go
    through the device's CXL.mem port (not the fast path's DRAM backdoor)."""
    return [e for e in PROTOCOL if host_port or e != "foreign_mem_refused"]


class NdpCoverage(uvm_subscriber):
    def start_of_simulation_phase(self):
        settings = ConfigDB().get(self, "", "SETTINGS")
        cfg = self.cfg = settings.device_config()
        nq = min(cfg.num_queues, 4)

        @CoverPoint("ndp.desc.op", xf=lambda d, s, q: op_name(d), bins=OPS)
        @CoverPoint("ndp.desc.dtype", xf=lambda d, s, q: dtype_name(d), bins=DTYPES)
        @CoverPoint("ndp.desc.flags", xf=lambda d, s, q: flags_name(d), bins=FLAGS)
        @CoverPoint("ndp.desc.queue", xf=lambda d, s, q: q, bins=list(range(nq)))
        @CoverPoint("ndp.status", xf=lambda d, s, q: s, bins=STATUSES)
        @CoverPoint("ndp.shape.k", xf=lambda d, s, q: self._k(d), bins=SHAPES)
        @CoverPoint("ndp.shape.n", xf=lambda d, s, q: self._n(d), bins=N_SHAPES)
        @CoverCross("ndp.op_x_status", items=["ndp.desc.op", "ndp.status"])
        @CoverCross("ndp.op_x_k", items=["ndp.desc.op", "ndp.shape.k"])
        @CoverCross("ndp.op_x_queue", items=["ndp.desc.op", "ndp.desc.queue"])
        def sample_descriptor(desc, status, queue):
            pass

        @CoverPoint("ndp.protocol", xf=lambda event: event, bins=protocol_events(settings.host_port))
        def sample_protocol(event):
            pass

        @CoverPoint("ndp.backpressure", xf=lambda channel: channel, bins=CHANNELS)
        def sample_stall(channel):
            pass

        self.sample_descriptor, self.sample_protocol = sample_descriptor, sample_protocol
        self.sample_stall = sample_stall

    def _k(self, desc):
        kn = k_and_n(desc)
        return None if kn is None else shape_class(kn[0], self.cfg.lanes, self.cfg.k_max, SHAPES)

    def _n(self, desc):
        kn = k_and_n(desc)
        return None if kn is None else shape_class(kn[1], self.cfg.lanes, self.cfg.n_max, N_SHAPES)

    @functools.singledispatchmethod
    def write(self, observed):
        raise TypeError(f"{type(observed).__name__}: the coverage samples no such thing")

    @write.register
    def _completion(self, seen: CompletionSeen):
        status = seen.status.name if isinstance(seen.status, Status) else "unknown"
        self.sample_descriptor(seen.descriptor, status, seen.queue)

    @write.register
    def _item(self, item: NdpItem):
        if item.fault_reached and item.completions and item.completions[0].status == Status.DRAM_ERROR:
            access, response = item.fault_reached
            self._protocol(f"dram_{access}_{'slverr' if response == 2 else 'decerr'}")
        if item.backpressure:
            for channel, count in item.stalls.items():
                if count and channel in CHANNELS:
                    self.sample_stall(channel)

    @write.register
    def _bus_event(self, event: BusEvent):
        d = event.detail
        if event.kind == "doorbell":
            if event.refused:
                self._protocol("foreign_doorbell_refused")
                return
            for name, hit in (("doorbell_before_valid_word", d["before_valid"]), ("repeated_doorbell", d["repeated"]),
                              ("stale_doorbell", d["stale"]), ("sequence_wrap", d["wrapped"]),
                              ("full_queue", d["full"])):
                if hit:
                    self._protocol(name)
        elif event.kind == "config_write" and event.refused:
            self._protocol("foreign_config_refused")
        elif event.kind == "mem_access" and event.refused and event.queue >= 0:
            self._protocol("foreign_mem_refused")

    def _protocol(self, name):
        self.sample_protocol(name)


def goal_outcomes(goals=GOALS):
    """{goal: (item, bins hit, bins required, the bins missed)} from the coverage database."""
    out = {}
    for goal, (name, excluded) in goals.items():
        bins = coverage_db[name].detailed_coverage if name in coverage_db else {}
        required = [b for b in bins if excluded is None or not excluded(b)]
        missed = [b for b in required if not bins[b]]
        out[goal] = (name, len(required) - len(missed), len(required), missed)
    return out


def report(path, goals=GOALS):
    """Write every coverage item's bins and the goals to `path` (JSON); returns the goals."""
    outcomes = goal_outcomes(goals)
    items = {}
    for name in sorted(coverage_db):
        item = coverage_db[name]
        entry = {"coverage": item.coverage, "size": item.size, "percent": item.cover_percentage}
        if isinstance(item, (CoverPoint, CoverCross)):
            entry["bins"] = {str(k): v for k, v in item.detailed_coverage.items()}
        items[name] = entry
    with open(path, "w") as f:
        json.dump({"goals": {g: {"item": n, "hit": hit, "required": req, "missed": [str(b) for b in missed],
                                 "met": bool(req) and not missed}
                             for g, (n, hit, req, missed) in outcomes.items()}, "items": items}, f, indent=1)
    return outcomes

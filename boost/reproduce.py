"""The reproduction table of issue 15 (item 4) and the pool comparison (item 5).

Each claim: the paper's figure (seed 002), ours, their ratio and a verdict (within 10 % or
a miss with its measured cause). Claims that the paper states as a gain (a speedup in
percent) are compared as gains, not as normalized times, so that a 7.4 % gain is not
'within 10 %' of any time between 0.97 and 1.18. How each is measured, and every miss
explained: docs/boost.md. The last line:

    boost claims=<n> within_10pct=<k> mpp_wave_ratio_max_err=<x>% bappr_wave_ratio_std=<x>% dsr_host_fraction=<x>%
"""
import dataclasses
import math
from typing import Any

import numpy as np

from isa.system import ModelConfig
from serving.claims import Claim

from .churn import ChurnResult
from .churn import simulate as churn
from .config import GiB, Machine, MiB, load_machine, load_model
from .kernels import add_kernel, cap_add_kernel
from .pages import Pam
from .pool import Echo, compare
from .pool import print_table as print_pool
from .step import DecodeStep, StepTime
from .waves import WaveModel

ADD_READ_BYTES = 512 * MiB      # a and b: the 1 GB the add kernel streams (section 2.6)
ADD_CTAS = 8192                 # 'thousands of CTAs across several waves' (docs/boost.md)


@dataclasses.dataclass
class AddKernelStudy:
    bappr_wave_mean: float
    bappr_wave_std: float
    bappr_waves: int
    bappr_kernel_std: float
    bappr_gain: float
    mpp_wave_ratios: np.ndarray     # every wave of the add kernel under MPP
    mpp_full_wave_ratios: np.ndarray
    mpp_gain: float
    weighted_gain: float
    cap_gains: dict[float, float]   # share -> gain
    ideal_gain: float


def add_kernel_study(machine: Machine, instances: int = 300, seed: int = 1) -> AddKernelStudy:
    wave = WaveModel(machine)
    k = add_kernel(machine, ADD_READ_BYTES, ADD_CTAS)
    base = wave.time(k).seconds
    rng = np.random.default_rng(seed)
    ratios: list[float] = []
    kernel_ratios: list[float] = []
    gains: list[float] = []
    for _ in range(instances):
        pam = Pam("bapp-r", machine.placement_modulus, machine.page_bytes, rng, alpha=machine.alpha)
        r = wave.time(k, {n: pam.place(ADD_READ_BYTES) for n in "abc"})
        full = r.wave_ctas == k.slots
        ratios.extend(r.wave_second_ratio[full])
        kernel_ratios.append(r.wave_second_ratio @ r.wave_ctas / r.wave_ctas.sum())
        gains.append(base / r.seconds - 1)
    pam = Pam("boost", machine.placement_modulus, machine.page_bytes)
    r = wave.time(k, {n: pam.place(ADD_READ_BYTES, k.footprints[n]) for n in "abc"})
    full = r.wave_ctas == k.slots
    mpp_gain = base / r.seconds - 1
    pam = Pam("weighted", machine.placement_modulus, machine.page_bytes)
    w = wave.time(k, {n: pam.place(ADD_READ_BYTES) for n in "abc"})
    shares = sorted({*np.round(np.arange(0.02, 0.2001, 0.0025), 4), round(1 / 12, 6),
                     round(machine.alpha / (1 + machine.alpha), 6)})
    cap = {s: base / wave.time(cap_add_kernel(machine, ADD_READ_BYTES, ADD_CTAS, s)).seconds - 1 for s in shares}
    ideal = 1 / WaveModel(machine.with_(hbm_sm_fraction=0, second_sm_fraction=0)).fluid_s(
        1 / (1 + machine.alpha), machine.alpha / (1 + machine.alpha)) / machine.hbm_bytes_per_s - 1
    return AddKernelStudy(float(np.mean(ratios)), float(np.std(ratios)), len(ratios),
                          float(np.std(kernel_ratios[:100])), float(np.mean(gains)),
                          r.wave_second_ratio, r.wave_second_ratio[full], mpp_gain, base / w.seconds - 1, cap, ideal)


def _pct(x: Any) -> Any:
    return 100 * x


def claims(machine: Machine, model: ModelConfig, add: AddKernelStudy, steps: dict[str, StepTime],
           churned: ChurnResult) -> list[Claim]:
    out: list[Claim] = []
    share = 1 / machine.placement_modulus
    # section 2.6: BAPP-R's ratio per wave and per kernel
    out.append(Claim(f"BAPP-R per-wave host ratio, mean ({add.bappr_waves} full waves)", 10.0,
                     _pct(add.bappr_wave_mean), "%"))
    out.append(Claim("BAPP-R per-wave host ratio, std", 3.6, _pct(add.bappr_wave_std), "%",
                     "a wave reads 66 pages (1056 CTAs x 64 KiB of a and of b): binomial std "
                     f"{_pct(math.sqrt(0.09 / 66)):.2f} %"))
    out.append(Claim("BAPP-R per-kernel host ratio, std (100 kernels)", 1.5, _pct(add.bappr_kernel_std), "%",
                     f"a kernel reads 512 pages: binomial std {_pct(math.sqrt(0.09 / 512)):.2f} %; the std of 100 "
                     "samples is itself uncertain by 7 %"))
    worst = add.mpp_full_wave_ratios[np.argmax(np.abs(add.mpp_full_wave_ratios - share))]
    out.append(Claim("MPP per-wave host ratio, worst full wave (paper: exact 1/12)", _pct(share), _pct(worst), "%",
                     "a wave reads 33 consecutive pages of each input; a window of 33 pages of a period-12 "
                     "pattern holds 2 or 3 host pages (6.06 % or 9.09 %): exact only over multiples of 12 pages"))
    out.append(Claim("BAPP-R add-kernel bandwidth change vs HBM only", -3.5, _pct(add.bappr_gain), "%",
                     "the host-heavy waves (ratio above 9.9 %) wait on the link; our waves' loss is the mean of "
                     "max() over the binomial ratios, with the SM budget of section 6.1"))
    # section 3: the CAP bound
    at = add.cap_gains[round(1 / 12, 6)]
    best = max(add.cap_gains, key=add.cap_gains.__getitem__)
    out.append(Claim("ideal CAP gain (1 + alpha)", 10.4, _pct(add.ideal_gain), "%"))
    out.append(Claim("handcrafted CAP add kernel: gain at 8.3 % host share", 7.4, _pct(at), "%",
                     "the SM budget (84 % + 20 % of the SMs) binds above 7.76 %"))
    out.append(Claim("handcrafted CAP add kernel: best host share", 8.3, _pct(best), "%",
                     f"the budget's bound meets HBM's at h/(1-h) = (1 - f_hbm) B_second / (f_second B_hbm); "
                     f"the paper's sweep steps are not given (8.3 % = 1/12); "
                     f"gain there {_pct(add.cap_gains[best]):.2f} %"))
    pre = WaveModel(machine.with_(second_bytes_per_s=0.1 * machine.hbm_bytes_per_s, hbm_sm_fraction=0,
                                  second_sm_fraction=0))
    d = 1.0
    cap_t = pre.fluid_s(d / 1.1, 0.1 * d / 1.1)
    pf_t = pre.prefetch_s(d / machine.hbm_bytes_per_s, 0.1 * d)
    out.append(Claim("CAP over an ideal prefetcher at alpha = 10 %", 22.0, _pct(pf_t / cap_t - 1), "%"))
    # Table 4 and section 5.6 (Llama-3.3-70B, batch 10, 512/4K: mean context 2560)
    hbm = steps["hbm"]
    rows = (("weighted", "weighted interleave", (1.06, 0.99, 0.99)),
            ("proportional", "proportional interleave", (0.60, 1.00, 0.75)),
            ("uvm", "cudaMallocManaged", (1.00, 1.00, 1.00)),
            ("boost", "BOOST", (1.07, 1.03, 1.04)))
    for key, label, (up, down, tpot) in rows:
        s = steps[key]
        for kern, paper in (("up", up), ("down", down)):
            ours = hbm.kernel_s(kern) / s.kernel_s(kern)
            why = ""
            if key == "weighted" and kern == "down":
                why = "no superpages: 18 of 64 down-projection tiles straddle a host page and stall (section 3.2)"
            if key == "proportional" and kern == "down":
                why = ("split-K puts every tile in every wave, so the linear tail spreads over the waves; the paper's "
                       "down-projection grid is not given")
            out.append(Claim(f"Table 4: {label}, {kern}-proj kernel", paper, ours, "x", why))
        out.append(Claim(f"Table 4: {label}, iso-batch TPOT", tpot, hbm.seconds / s.seconds, "x"))
    out.append(Claim("Fig. 13: prefetching (K = 12), iso-batch TPOT", 0.94,
                     hbm.seconds / steps["prefetch"].seconds, "x"))
    gain = hbm.seconds / steps["boost"].seconds - 1
    out.append(Claim("section 5.6: BOOST iso-batch TPOT gain, Llama-3.3", 4.2, _pct(gain), "%",
                     "every weight GEMM here reaches the CAP bound (7.7 %); the real step also runs kernels we do "
                     "not model (norms, rotary, sampling, launches) and loses L2 reuse on host loads (section 5.10)"))
    out.append(Claim("section 5.6: BAPP-R iso-batch TPOT, Llama-3.3", 0.973, hbm.seconds / steps["bapp-r"].seconds, "x",
                     "each GEMM's pages are drawn anew: host-heavy waves wait on the link, and down-projection "
                     "tiles straddling a host page stall; the paper's measured loss is smaller"))
    # Fig. 19: DSR under churn (Qwen3-30B, H = 4, LongWriter at 2.5 req/s)
    med = churned.window_medians
    out.append(Claim("Fig. 19: DSR realized host fraction, median", _pct(share), _pct(churned.median), "%"))
    out.append(Claim("Fig. 19: rolling median, lowest", 7.7, _pct(med.min()), "%",
                     "our windows stay closer to 1/12 than the paper's"))
    out.append(Claim("Fig. 19: rolling median, highest", 9.2, _pct(med.max()), "%",
                     "our windows stay closer to 1/12 than the paper's"))
    out.append(Claim("Fig. 19: windows within +-1 % of 8.3 %", 1.0,
                     float(np.mean(np.abs(med - share) <= 0.01)), "share"))
    return out


def print_table(table: list[Claim], echo: Echo = print) -> None:
    echo(f"{'claim':62s} {'paper':>8s} {'ours':>8s} {'ratio':>7s}  verdict")
    for c in table:
        verdict = "within 10%" if c.within else f"miss: {c.why}"
        echo(f"{c.what:62s} {c.paper:8.3g} {c.sim:8.3g} {c.ratio:7.3f}  {verdict} [{c.unit}]")


def reproduce(echo: Echo = print, requests: int = 2000, pool_requests: int = 128,
              instances: int = 300) -> list[Claim]:
    machine = load_machine("gh200")
    llama = load_model("llama3.3-70b")
    add = add_kernel_study(machine, instances)
    step = DecodeStep(machine, llama, batch=10, context=2560)
    steps = {p: step.time(p) for p in ("hbm", "boost", "weighted", "proportional", "bapp-r")}
    capacity = machine.hbm_utilization * machine.hbm_bytes
    steps["uvm"] = dataclasses.replace(steps["hbm"], policy="uvm", seconds=step.uvm(steps["hbm"], capacity))
    pf, _ = step.prefetch(steps["hbm"])
    steps["prefetch"] = dataclasses.replace(steps["hbm"], policy="prefetch", seconds=pf)
    churned = churn(machine, load_model("qwen3-30b-a3b"), requests=requests)
    table = claims(machine, llama, add, steps, churned)
    echo(f"BOOST on {machine.name}: HBM {machine.hbm_bytes_per_s / GiB:.0f} GiB/s, second tier "
         f"{machine.second_bytes_per_s / GiB:.0f} GiB/s (alpha {machine.alpha:.4f}), modulus "
         f"{machine.placement_modulus}, SM fractions {machine.hbm_sm_fraction} + {machine.second_sm_fraction}")
    print_table(table, echo)
    echo("")
    echo("Decode step, Llama-3.3-70B FP8, batch 10, context 2560 (ms; kernels summed over layers):")
    names = list(steps["hbm"].by_kernel)
    echo(f"{'policy':14s} {'step':>8s} " + " ".join(f"{n:>9s}" for n in names))
    for p, s in steps.items():
        cells = " ".join(f"{s.by_kernel[n] * 1e3:9.3f}" for n in names) if p in ("hbm", "boost", "weighted",
                                                                                 "proportional", "bapp-r") else ""
        echo(f"{p:14s} {s.seconds * 1e3:8.3f} {cells}")
    echo("")
    echo(f"DSR churn (Qwen3-30B-A3B, 4 KV heads, LongWriter at 2.5 req/s, {requests} requests): "
         f"{len(churned.fraction)} steps, mean batch {churned.batch.mean():.0f}, preemptions {churned.preemptions}, "
         f"requests across a boundary condition {churned.mixed_requests}, "
         f"host fraction min {_pct(churned.fraction.min()):.2f} % "
         f"max {_pct(churned.fraction.max()):.2f} %")
    echo("")
    echo(f"BOOST in PLoRA's pool (Llama2-7B, H100, 4 paper devices, batch 32, {pool_requests} requests per run):")
    print_pool(compare(requests=pool_requests), echo)
    share = 1 / machine.placement_modulus
    mpp_err = float(np.max(np.abs(add.mpp_wave_ratios - share)))
    echo(f"boost claims={len(table)} within_10pct={sum(c.within for c in table)} "
         f"mpp_wave_ratio_max_err={_pct(mpp_err):.2f}% bappr_wave_ratio_std={_pct(add.bappr_wave_std):.2f}% "
         f"dsr_host_fraction={_pct(churned.median):.2f}%")
    return table

"""`make verify` (`plora verify`): the verification environment at full size, on a fresh
checkout in about <see docs/verification.md> minutes on two cores. Each part prints its
line; the last line is

    verify coverage_goals=<n> met=<k> fuzz_model=<n> fuzz_rtl=<n> faults=<n> resets=<n> soak=<n> lost=<n> duplicated=<n>

Parts: the pyuvm environment (verify/uvm) at full size on the fast path, its coverage goals
and the scoreboard's faults, and at the bench's size on the cocotbext-axi bench (PASID
refusals on CXL.mem, cocotbext-axi's pause generators); fuzzing on the model and on the RTL
(verify/fuzz.py); resets on both RTL tops (verify/reset.py: host bursts on the bench); the
soak on the fast path, and a shorter one on the bench (verify/soak.py). Any failure stops
the run with the part's error."""
import asyncio
import json
import time

import isa
from rtlbench import runner
from rtlbench.backend import ModelBackend

from . import fuzz, soak
from .rtl import OUT, run_rtl
from .settings import VerifySettings

FULL = {"fuzz_model": 100_000, "fuzz_rtl": 10_000, "resets_fast": 200, "resets_bfm": 6, "soak": 10_000,
        "soak_bfm": 60}


def fuzz_model(config, count, seed=1):
    async def main():
        env = await ModelBackend.start(config)
        return await fuzz.run(env, count, seed)
    return asyncio.run(main())


def run_uvm(config, size, backend):
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"uvm-{config}-{backend}-{size}.json"
    run = runner.run_fast if backend == "fast" else runner.run
    run("verify.cocotb_uvm", testcase="uvm", config=config,
        env={**VerifySettings(config=config, size=size, out=str(out)).env(), "COCOTB_LOG_LEVEL": "WARNING"})
    return json.loads(out.read_text())


def main(config="default", sizes=FULL, echo=print):
    started = time.time()
    cfg = isa.load_config(config)

    def part(name, t0):
        echo(f"  ({name}: {time.time() - t0:.0f} s)")

    t0 = time.time()
    uvm = run_uvm(config, "full", "fast")
    goals = uvm["goals"]
    for goal, g in goals.items():
        echo(f"coverage {goal}: {g['hit']}/{g['required']} bins" + ("" if g["met"] else f" MISSED {g['missed']}"))
    board = uvm["scoreboard"]
    echo(f"uvm backend=rtl_fast items={board['items']} replayed_on_model={board['replayed']} "
         f"cycle_error_median={board.get('cycle_error_median', 0):.2f}% worst={board.get('cycle_error_worst', 0):.2f}%")
    faults = board.get("faults", {})
    for key, n in sorted(faults.items()):
        echo(f"fault {key}: {n}")
    part("uvm, fast path", t0)
    t0 = time.time()
    bench = run_uvm(config, "bfm", "bfm")
    echo(f"uvm backend=rtl items={bench['scoreboard']['items']} replayed_on_model={bench['scoreboard']['replayed']}")
    for key, n in sorted(bench["scoreboard"].get("faults", {}).items()):
        echo(f"fault (bench) {key}: {n}")
        faults[f"bench {key}"] = n
    part("uvm, cocotbext-axi bench", t0)

    t0 = time.time()
    model = fuzz_model(config, sizes["fuzz_model"])
    echo(model.line("model"))
    rtl = run_rtl("fuzz", config, sizes["fuzz_rtl"], 2, "fast")
    echo(rtl["line"])
    part("fuzz", t0)

    t0 = time.time()
    resets = [run_rtl("reset", config, sizes["resets_fast"], 3, "fast"),
              run_rtl("reset", config, sizes["resets_bfm"], 4, "bfm")]
    for r in resets:
        echo(r["line"])
    part("reset", t0)

    t0 = time.time()
    soaks = [soak.run(config, sizes["soak"], 5, "fast"), soak.run(config, sizes["soak_bfm"], 6, "bfm")]
    for s, name in zip(soaks, ("fast path", "cocotbext-axi bench")):
        echo(f"{s.line(cfg.name)} ({name})")
    part("soak", t0)

    met = sum(g["met"] for g in goals.values())
    line = (f"verify coverage_goals={len(goals)} met={met} fuzz_model={model.count} fuzz_rtl={rtl['count']} "
            f"faults={sum(faults.values())} resets={sum(r['resets'] for r in resets)} "
            f"soak={sum(s.count for s in soaks)} lost={sum(s.lost for s in soaks)} "
            f"duplicated={sum(s.duplicated for s in soaks)}")
    echo(f"({time.time() - started:.0f} s in all)")
    echo(line)
    return line

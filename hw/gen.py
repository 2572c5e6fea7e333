"""Generate the Verilog of a device config: `python -m hw.gen [--config NAME] [-o FILE]`.

`emit_src=False` keeps local paths out of the output, so the committed `rtl/` file is
byte-identical wherever the checkout lives. With `-o`, the file is written only when its
content changes: an unchanged file keeps its time, so the Verilator builds that depend on
it (cocotb's runner rebuilds when a source is newer than its binary) are not redone.
"""
import argparse
import pathlib

from amaranth.back import verilog

import isa
from .device import NdpDevice
from .fp_cells import cell_verilog

TOP = "ndp_device"
REPO = pathlib.Path(__file__).resolve().parents[1]


def source_digest(salt, folders=("hw", "isa")):
    """A hash of what a product of the RTL depends on: the .py and .json files of `folders`
    (hw/ and isa/, configs included), Amaranth's version and `salt` (what else it depends
    on). The generated Verilog (rtlbench/runner.py) and the synthesis results (area/) are
    cached by it."""
    import hashlib
    from importlib.metadata import version
    digest = hashlib.sha256(f"{salt} amaranth {version('amaranth')}".encode())
    for folder in folders:
        for file in sorted((REPO / folder).rglob("*")):
            if file.suffix in (".py", ".json"):
                digest.update(str(file.relative_to(REPO)).encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


def generate(cfg):
    """The device's Verilog, followed by the shared FP cells it instantiates."""
    return verilog.convert(NdpDevice(cfg), name=TOP, emit_src=False) + cell_verilog()


def write_if_changed(path, text):
    """Write `text` to `path` unless the file already holds exactly it (then its time is
    kept); True when it was written. The new content goes to a temporary file beside it
    first, so an interrupted run never leaves a half-written file."""
    path = pathlib.Path(path)
    data = text.encode()
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="default", help="config name in isa/configs or a JSON path")
    parser.add_argument("-o", "--output", type=pathlib.Path, help="output file (default: stdout)")
    args = parser.parse_args(argv)
    text = generate(isa.load_config(args.config))
    if args.output:
        written = write_if_changed(args.output, text)
        print(f"{args.output}: {'written' if written else 'unchanged'}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()

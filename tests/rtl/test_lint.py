"""The committed RTL is current, and Verilator's -Wall lint finds nothing but the known
artifacts of Yosys's Verilog writer, each argued below. Any other warning fails."""
import os
import re
import subprocess

import pytest

import isa
from hw.gen import generate
from rtlbench.runner import RTL, TOP, rtl_source, verilator_env

# (warning code, message pattern): why it is not a bug in Amaranth-generated Verilog
ALLOWED = [
    # Yosys writes each operand at its own width and relies on Verilog's zero extension
    # to the expression width, which is exactly Amaranth's unsigned-operand semantics;
    # signed operands are written as $signed(...) and extended by sign.
    ("WIDTHEXPAND", r"Operator \w+ expects \d+ bits? on the (LHS|RHS)"),
    # `!vector` is Yosys's spelling of `vector == 0` (a reduce-NOR), not a 1-bit NOT.
    ("WIDTHTRUNC", r"Logical operator LOGNOT expects 1 bit on the LHS"),
    # Amaranth's bit_select/word_select become `wide >> offset` assigned to a slice-wide
    # wire: the truncation is the selection.
    ("WIDTHTRUNC", r"Operator ASSIGNW expects \d+ bits on the Assign RHS, but Assign RHS's SHIFTR"),
    # style: unused bits of buses and descriptor fields, cases whose default is an
    # assignment before the case, initialised registers, a file holding several modules
    ("UNUSEDSIGNAL", r""),
    ("CASEINCOMPLETE", r""),
    ("PROCASSINIT", r""),
    ("DECLFILENAME", r""),
]
WARNING = re.compile(r"^%Warning-(\w+): [^:]+:\d+:\d+: (.*)$")


def test_committed_rtl_is_current():
    assert RTL.read_text() == generate(isa.load_config("default")), \
        "rtl/ndp_device.v is stale: run `make rtl` and commit it with the hw/ change"


def test_generated_rtl_has_no_local_paths():
    # no checkout path, and no source attribute (`(* src = "file.py:line" *)`), which would
    # carry one; a signal may be named src
    text = RTL.read_text()
    assert "/work/" not in text and not re.search(r"\(\*\s*src\s*=", text)
    assert re.search(r"\(\*\s*src\s*=", '(* src = "/x/hw/fp.py:1" *)\nwire a;')


def test_verilator_lint():
    lint(RTL)


# the generated configs linted, NDP_LINT_CONFIGS: `make lint` lints quad (4 channels) and the
# paper's device (isa/configs/paper.json: 512 lanes x 2 rows = 1024 MACs, 16 channels), whose
# generation and lint take about 5 minutes on 2 cores. Unset, quad alone, marked slow: its
# generation is about a minute of Amaranth's conversion on two cores, out of `make test` to
# keep it within CI's 15 minutes (the default config's lint above stays), in `make test-full`
LINT_CONFIGS = (os.environ["NDP_LINT_CONFIGS"].split() if "NDP_LINT_CONFIGS" in os.environ
                else [pytest.param("quad", marks=pytest.mark.slow)])


@pytest.mark.parametrize("config", LINT_CONFIGS)
def test_config_generates_and_lints(config):
    """A multi-channel config generates and passes the same lint (`make validate
    CONFIG=paper` builds and runs the paper's)."""
    lint(rtl_source(config))


def lint(path):
    verilator_env()
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", TOP, str(path)],
                          capture_output=True, text=True)
    lines = proc.stderr.splitlines()
    unparsed = [line for line in lines if line.startswith("%Warning") and not WARNING.match(line)]
    assert not unparsed, f"unparsed Verilator warnings: {unparsed[:5]}"
    warnings = [m.groups() for m in map(WARNING.match, lines) if m]
    unexplained = [(code, msg) for code, msg in warnings
                   if not any(code == c and re.search(p, msg) for c, p in ALLOWED)]
    assert not unexplained, "\n".join(f"{c}: {m}" for c, m in unexplained[:20])
    errors = [line for line in lines if line.startswith("%Error") and "warning(s)" not in line]
    assert not errors, "\n".join(errors)

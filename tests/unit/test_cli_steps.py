"""`plora steps` (scheduler/cli.py through plora_cli) with click's CliRunner: the per-step
detail, and `--summary`, whose numbers must be the sums over that detail (parsed here from
the detail's own lines, not from the summary's code)."""
import collections
import re

import pytest
from click.testing import CliRunner

from plora_cli import main

ARGS = ("steps", "--steps", "3", "--adapters", "30", "--batch", "12", "--seed", "3")

HEADER = re.compile(r"^step (\d+): (\d+) sites \(([^)]*)\); GPU ([0-9.]+) of ([0-9.]+) GB; "
                    r"KV duplicated ([0-9.]+) ")
DECISION = re.compile(r"^adapter \S+ / \S+ \(batch \d+, R=\d+, GPU holds \w+\) -> (E\d): ")
CANDIDATE = re.compile(r"^    (E\d)  step .* = +([0-9.]+) us$")
STEP_LINE = re.compile(r"^step (\d+): (\d+) sites \(E1 (\d+), E2 (\d+), E3 (\d+), E4 (\d+)\), chosen costs "
                       r"([0-9.]+) us, (\d+) loads \(([0-9.]+) MB\), (\d+) evictions, GPU ([0-9.]+) of ([0-9.]+) GB, "
                       r"KV duplicated ([0-9.]+)$")
LAST_LINE = re.compile(r"^steps n=(\d+) sites=(\d+) E1=(\d+) E2=(\d+) E3=(\d+) E4=(\d+) chosen_us=([0-9.]+) "
                       r"loads=(\d+) evictions=(\d+)$")


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output.splitlines()


def parse_detail(lines):
    """Per step, from the detail alone: the header's sites, mix, GPU and KV share; the number
    of decision lines, the strategies they chose, and the sum of each chosen candidate's
    `= ... us` (the first candidate line of the chosen strategy under its decision)."""
    steps, step, chosen = [], None, None
    for line in lines:
        m = HEADER.match(line)
        if m:
            mix = {k: int(v) for k, v in (item.split() for item in m[3].split(", "))}
            step = dict(step=int(m[1]), sites=int(m[2]), mix=mix, gpu=float(m[4]), budget=float(m[5]),
                        kv=float(m[6]), decisions=0, chose=collections.Counter(), chosen_us=0.0)
            steps.append(step)
            continue
        m = DECISION.match(line)
        if m:
            chosen = m[1]
            step["decisions"] += 1
            step["chose"][chosen] += 1
            continue
        m = CANDIDATE.match(line)
        if m and m[1] == chosen:
            step["chosen_us"] += float(m[2])
            chosen = None
    return steps


def test_summary_numbers_are_sums_over_the_detail():
    detail_lines = invoke(*ARGS)
    detail = parse_detail(detail_lines)
    assert [s["step"] for s in detail] == [1, 2, 3]
    summary = invoke(*ARGS, "--summary")
    assert len(summary) == 4                                     # a line per step and the last line
    # the default output ends with the same summary, after the detail
    assert detail_lines[-5:] == ["summary:", *summary]
    for step, line in zip(detail, summary[:3]):
        m = STEP_LINE.match(line)
        assert m, line
        assert int(m[1]) == step["step"]
        assert int(m[2]) == step["sites"] == step["decisions"] > 0
        counts = [int(m[i]) for i in (3, 4, 5, 6)]
        assert counts == [step["chose"].get(s, 0) for s in ("E1", "E2", "E3", "E4")]
        assert counts == [step["mix"].get(s, 0) for s in ("E1", "E2", "E3", "E4")]
        assert sum(counts) == step["sites"]
        # each candidate's cost is printed to 0.01 us: the sum within half a hundredth a site
        assert float(m[7]) == pytest.approx(step["chosen_us"], abs=0.005 * step["sites"] + 0.01)
        assert float(m[11]) == pytest.approx(step["gpu"], abs=1e-3)
        assert float(m[12]) == pytest.approx(step["budget"], abs=1e-3)
        assert float(m[13]) == pytest.approx(step["kv"], abs=1e-3)
    last = LAST_LINE.match(summary[-1])
    assert last, summary[-1]
    steps = [STEP_LINE.match(line) for line in summary[:3]]
    assert int(last[1]) == 3
    for group, column in ((2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (8, 8), (9, 10)):
        assert int(last[group]) == sum(int(s[column]) for s in steps), group
    assert float(last[7]) == pytest.approx(sum(s["chosen_us"] for s in detail), abs=0.005 * int(last[2]) + 0.05)


def test_summary_follows_the_options():
    one = invoke("steps", "--steps", "1", "--adapters", "10", "--batch", "4", "--summary")
    assert len(one) == 2 and one[-1].startswith("steps n=1 ")
    two = invoke("steps", "--steps", "2", "--adapters", "10", "--batch", "4", "--summary")
    assert two[0] == one[0]                                      # same seed: the same first step
    assert two[-1].startswith("steps n=2 ")

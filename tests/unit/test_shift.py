"""hw/shift.py on Amaranth's simulator against Python's operators: the barrel shifters
(right, zero-filled, narrowing to `width`; left, cut at `width`) and mask_below, over
random values and every amount; and shift_right_muxes against its stages counted by hand."""
import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from hw.shift import mask_below, shift_left, shift_left_muxes, shift_right, shift_right_muxes


def evaluate(build, inputs, cases):
    """Each case's outputs of the comb design `build(m, *signals)` for input values."""
    m = Module()
    signals = [Signal(width, name=f"in{i}") for i, width in enumerate(inputs)]
    out = build(m, *signals)
    got = []

    async def bench(ctx):
        for case in cases:
            for s, v in zip(signals, case):
                ctx.set(s, v)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("unit, units, width_units", [(16, 8, 8), (16, 16, 8), (8, 12, 5), (1, 64, 32)])
def test_shift_right_is_the_operator(unit, units, width_units):
    rng = random.Random(unit * units)
    amount_bits = (2 * units - 1).bit_length()
    cases = [(rng.getrandbits(unit * units), a) for a in range(1 << amount_bits)]
    got = evaluate(lambda m, v, a: shift_right(m, v, a, unit, unit * width_units), [unit * units, amount_bits], cases)
    mask = (1 << (unit * width_units)) - 1
    assert got == [(v >> (a * unit)) & mask for v, a in cases]


@pytest.mark.parametrize("unit, units, width_units", [(16, 8, 8), (8, 4, 12), (1, 32, 40)])
def test_shift_left_is_the_operator(unit, units, width_units):
    rng = random.Random(unit + units)
    amount_bits = (width_units - 1).bit_length() + 1
    cases = [(rng.getrandbits(unit * units), a) for a in range(1 << amount_bits)]
    got = evaluate(lambda m, v, a: shift_left(m, v, a, unit, unit * width_units), [unit * units, amount_bits], cases)
    mask = (1 << (unit * width_units)) - 1
    assert got == [(v << (a * unit)) & mask for v, a in cases]


@pytest.mark.parametrize("units, unit_bits", [(64, 1), (40, 8), (9, 3)])
def test_mask_below_is_the_shifted_constant(units, unit_bits):
    n_bits = units.bit_length() + 1
    cases = [(n,) for n in range(1 << n_bits)]
    got = evaluate(lambda m, n: mask_below(m, n, units, unit_bits), [n_bits], cases)
    assert got == [((1 << (n * unit_bits)) - 1) & ((1 << (units * unit_bits)) - 1) for (n,) in cases]


def test_shift_right_muxes_counts_its_stages():
    # 64 one-bit units to 32, amount 5 bits: the digit at bit 4 (1 bit, 2:1) over
    # min(64, 32 + 15) = 47 units, then the digit at bit 0 (4 bits, 16:1 = 15 muxes) over 32
    assert shift_right_muxes(64, 5, 1, 32) == 47 * 1 + 32 * 15
    # 16-bit units: the same in bits
    assert shift_right_muxes(64 * 16, 5, 16, 32 * 16) == 16 * (47 * 1 + 32 * 15)
    # no amount, no stage
    assert shift_right_muxes(64, 0, 1, 32) == 0


def test_shift_left_muxes_counts_its_stages():
    # 32 units of 1 bit moved by 0..31 (5 bits) into 64: the digit at bit 0 (16:1 = 15
    # muxes) over min(64, 32 + 15) = 47, then the digit at bit 4 (1 bit, 2:1) over
    # min(64, 47 + 16) = 63
    assert shift_left_muxes(32, 5, 1, 64) == 47 * 15 + 63 * 1
    # units of 8 bits: every width in bits, the same count per bit
    assert shift_left_muxes(32 * 8, 5, 8, 64 * 8) == 8 * (47 * 15 + 63 * 1)
    assert shift_left_muxes(32, 0, 1, 64) == 0


"""Wide variable shifts and masks whose netlist grows linearly in the width.

Amaranth turns a variable shift or part-select (`a >> b`, `a << b`, `a.bit_select(b, w)`,
`(1 << n) - 1`) into one netlist cell in which every output bit depends on every input bit,
and its combinational-cycle check (`Netlist.check_comb_cycles`) walks those edges bit by
bit: an 8192-bit window is 10^8 edges per shift, and generation never ends at 512 lanes.

Here a shift by `amount` units of `unit_bits` bits is a logarithmic barrel shifter on whole
units: one stage per DIGIT_BITS-bit digit of `amount` (high digits first for a right shift,
low first for a left one), each stage a named Signal chosen by a `Switch` on its digit among
2**DIGIT_BITS constant shifts of the previous stage. A stage's output bit depends on
2**DIGIT_BITS bits and the digit, so the netlist is O(width * stages). Stages of 16
(rather than log2 stages of 2:1 multiplexers) because Verilator runs one case arm per
stage, one pass over the vector, where a 2:1 stage costs a pass per amount bit: with 2:1
stages the line packer alone made the default design's simulation ~12 % slower, with
16-way stages it costs about what the single shift did. The results equal the plain
operators bit for bit (zero-filled, unsigned).

`mask_below` (unit i all ones iff i < n) is comparators on 32-bit chunks, with one table
of partial chunks, not a shifted constant.
"""
from amaranth import Cat, Const, Mux, Signal, Value

__all__ = ["DIGIT_BITS", "shift_right", "shift_right_muxes", "shift_left", "shift_left_muxes", "mask_below"]

DIGIT_BITS = 4            # a stage per 4 bits of the amount: 16-way stages
CHUNK_BITS = 32           # mask_below's comparator granularity (Verilator's word)


def _unsigned(value):
    value = Value.cast(value)
    return value.as_unsigned() if value.shape().signed else value


def _finish(m, cur, width, name):
    if len(cur) == width:
        return cur
    out = Signal(width, name=f"{name}_out")     # a result wider than the input, or no stages
    m.d.comb += out.eq(cur)
    return out


def _right_stages(value_bits, amount_bits, unit_bits, width):
    """shift_right's stages: (the digit's low bit, its bits, the stage's width in bits).
    High digits first: after the stage of the digit at bit lo, only the bits below
    width + (2**lo - 1) units can still reach the result, so the stages narrow."""
    cur = value_bits
    for lo in reversed(range(0, amount_bits, DIGIT_BITS)):
        cur = min(cur, width + ((1 << lo) - 1) * unit_bits)
        yield lo, min(DIGIT_BITS, amount_bits - lo), cur


def shift_right_muxes(value_bits, amount_bits, unit_bits, width):
    """The two-input multiplexers shift_right's stages amount to (a 2^d:1 choice is
    2^d - 1 of them), for an area model of a block built on it."""
    return sum(bits * ((1 << digit_bits) - 1)
               for _, digit_bits, bits in _right_stages(value_bits, amount_bits, unit_bits, width))


def shift_right(m, value, amount, unit_bits, width=None, *, name="shr"):
    """`(value >> (amount * unit_bits))[:width]`, zero-filled: `width` bits (default
    `len(value)`) starting `amount` units of `unit_bits` bits into `value`; units past its
    end are 0. `amount` is unsigned. Adds the stages to `m.d.comb`; returns the last."""
    value, amount = _unsigned(value), _unsigned(amount)
    width = len(value) if width is None else width
    cur = value
    for lo, digit_bits, stage_bits in _right_stages(len(value), len(amount), unit_bits, width):
        digit = amount[lo:lo + digit_bits]
        stage = Signal(stage_bits, name=f"{name}_d{lo}")
        with m.Switch(digit):
            for d in range(1 << len(digit)):
                step = (d * unit_bits) << lo
                with m.Case(d):
                    m.d.comb += stage.eq(cur[step:] if step < len(cur) else 0)
        cur = stage
    return _finish(m, cur, width, name)


def _left_stages(value_bits, amount_bits, unit_bits, width):
    """shift_left's stages: (the digit's low bit, its bits, the stage's width in bits).
    Low digits first: each stage widens by the most it can shift in, up to `width`."""
    cur = min(value_bits, width)
    for lo in range(0, amount_bits, DIGIT_BITS):
        digit_bits = min(DIGIT_BITS, amount_bits - lo)
        cur = min(width, cur + ((((1 << digit_bits) - 1) * unit_bits) << lo))
        yield lo, digit_bits, cur


def shift_left_muxes(value_bits, amount_bits, unit_bits, width):
    """shift_right_muxes for shift_left."""
    return sum(bits * ((1 << digit_bits) - 1)
               for _, digit_bits, bits in _left_stages(value_bits, amount_bits, unit_bits, width))


def shift_left(m, value, amount, unit_bits, width, *, name="shl"):
    """`(value << (amount * unit_bits))[:width]`: `value` moved up `amount` units of
    `unit_bits` bits, zeros below it, cut at `width` bits. `amount` is unsigned. Adds the
    stages to `m.d.comb`; returns the last."""
    value, amount = _unsigned(value), _unsigned(amount)
    cur = value[:width]
    for lo, digit_bits, stage_bits in _left_stages(len(value), len(amount), unit_bits, width):
        digit = amount[lo:lo + digit_bits]
        stage = Signal(stage_bits, name=f"{name}_d{lo}")
        with m.Switch(digit):
            for d in range(1 << len(digit)):
                step = (d * unit_bits) << lo
                with m.Case(d):
                    m.d.comb += stage.eq(Cat(Const(0, step), cur) if step < width else 0)
        cur = stage
    return _finish(m, cur, width, name)


def mask_below(m, n, units, unit_bits=1, *, name="mask"):
    """`units` units of `unit_bits` bits, unit i all ones iff i < n (n unsigned):
    `((1 << (n * unit_bits)) - 1)[:units * unit_bits]` without the shift. Per chunk of
    CHUNK_BITS bits (k units), two comparators on n // k pick all ones, all zeros, or the
    partial chunk of n % k units."""
    n = _unsigned(n)
    width = units * unit_bits
    mask = Signal(width, name=name)
    k = CHUNK_BITS // unit_bits if CHUNK_BITS % unit_bits == 0 else 1
    if k <= 1:
        m.d.comb += mask.eq(Cat(Mux(n > i, (1 << unit_bits) - 1, 0) for i in range(units)))
        return mask
    k_bits = k.bit_length() - 1                 # k is a power of two: unit_bits divides 32
    full, rest = (n[k_bits:] if len(n) > k_bits else Const(0, 1)), n[:k_bits]
    partial = Signal(CHUNK_BITS, name=f"{name}_partial")
    with m.Switch(rest):
        for r in range(min(k, 1 << len(rest))):
            with m.Case(r):
                m.d.comb += partial.eq((1 << (r * unit_bits)) - 1)
    ones = (1 << CHUNK_BITS) - 1
    m.d.comb += mask.eq(Cat(Mux(full > c, ones, Mux(full == c, partial, 0))
                            for c in range(-(-width // CHUNK_BITS))))
    return mask

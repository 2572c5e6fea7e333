"""The one definition: descriptor pack/unpack, field layout, register map, configs."""
import dataclasses

import pytest
from hypothesis import given, strategies as st

import isa
from isa import Descriptor, FIELDS, DESC_BITS, regs, slots

field_values = st.fixed_dictionaries({name: st.integers(0, (1 << width) - 1) for name, _, width in FIELDS})


@given(field_values)
def test_pack_unpack_round_trip(values):
    desc = Descriptor(**values)
    word = desc.pack()
    assert len(word) == 32
    assert Descriptor.unpack(word) == desc
    assert int.from_bytes(word, "little") >> DESC_BITS == 0       # bits 204..255 are zero


@given(field_values)
def test_each_field_lands_at_its_bits(values):
    """Against the spec's table, re-typed here on purpose: the layout must not drift."""
    table = {"type": (0, 1), "op": (2, 5), "dtype": (6, 9), "flags": (10, 19), "dev_addr": (20, 83),
             "dev_size": (84, 103), "dev_rows": (104, 123), "dev_cols": (124, 143),
             "in_size": (144, 163), "in_rows": (164, 183), "in_cols": (184, 203)}
    word = Descriptor(**values).to_int()
    for name, (lo, hi) in table.items():
        assert (word >> lo) & ((1 << (hi - lo + 1)) - 1) == values[name], name


@pytest.mark.parametrize("name,lsb,width", FIELDS)
def test_field_boundaries(name, lsb, width):
    for value in (0, 1, (1 << width) - 2, (1 << width) - 1):
        desc = Descriptor(**{name: value})
        assert Descriptor.unpack(desc.pack()) == desc
        # only this field's bits are set beyond the defaults
        others = Descriptor(**{name: 0}).to_int()
        assert (desc.to_int() ^ others) == value << lsb
    for bad in (-1, 1 << width):
        with pytest.raises(ValueError, match=name):
            Descriptor(**{name: bad})


def test_flags_layout_is_the_documented_one():
    """The flags' own fields against docs/read-compute-project.md, re-typed here: TRANS_W
    word bit 10, PARTIAL 11, PAGED 12, PAGE_SHIFT 13..16, 17..19 reserved; and the RTL's
    descriptor layout views the same bits under the same names."""
    from amaranth.lib import data
    from hw.decoder import DescriptorLayout
    from isa.descriptor import FLAG_FIELD, Flag, PAGE_SHIFT_MASK, page_flags, page_shift_of
    word_bits = {"trans_w": (10, 10), "partial": (11, 11), "paged": (12, 12), "page_shift": (13, 16),
                 "reserved": (17, 19)}
    flags_lsb = 10
    assert {name: (flags_lsb + lsb, flags_lsb + lsb + width - 1) for name, (lsb, width) in FLAG_FIELD.items()} \
        == word_bits
    assert (int(Flag.TRANS_W), int(Flag.PARTIAL), int(Flag.PAGED), PAGE_SHIFT_MASK) == (1, 2, 4, 0b1111 << 3)
    assert page_shift_of(page_flags(7)) == 7 and page_flags(7) == 1 | 4 | (7 << 3)
    flags = DescriptorLayout["flags"].shape
    assert isinstance(flags, data.StructLayout)
    for name, (lo, hi) in word_bits.items():
        field = flags[name]
        assert (flags_lsb + field.offset, field.width) == (lo, hi - lo + 1), name


def test_unpack_wrong_length():
    with pytest.raises(ValueError, match="32 bytes"):
        Descriptor.unpack(bytes(31))


def test_register_map_matches_spec():
    assert (regs.ID, regs.VERSION, regs.NUM_QUEUES, regs.LANES, regs.ROWS) == (0, 4, 8, 0xC, 0x10)
    assert (regs.IN_BUF_BYTES, regs.OUT_BUF_BYTES, regs.DRAM_BUF_BYTES) == (0x14, 0x18, 0x1C)
    assert regs.queue_reg(2, regs.DOORBELL) == 0x100 + 0x80 + 0x28
    assert (regs.HEAD, regs.STATUS, regs.CFG, regs.CTRL) == (0x2C, 0x30, 0x20, 0x24)
    assert regs.cfg_value(3, 9, 0xABCDE) == 3 | 9 << 4 | 0xABCDE << 12
    assert regs.ID_VALUE == 0x4E445031 and regs.VERSION_VALUE == 0x00010000


def test_slot_layout_matches_spec():
    assert (slots.SQ_DESC, slots.SQ_VALID, slots.SQ_PAYLOAD) == (0, 32, 64)
    assert (slots.CQ_SEQ, slots.CQ_STATUS, slots.CQ_CYCLES, slots.CQ_PAYLOAD) == (0, 8, 16, 64)
    assert [slots.slot_index(s, 2) for s in range(1, 10)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert slots.slot_addr(0x1000, 6, 2, 8) == 0x1000 + 1 * 256


def test_status_codes_match_spec():
    # the spec's codes (section 4), then the project's own from 0x80 (docs/read-compute-project.md)
    assert [(s.name, int(s)) for s in isa.Status] == [
        ("OK", 0), ("BAD_OP", 1), ("BAD_DTYPE", 2), ("BOUNDS", 3), ("BAD_SHAPE", 4), ("DRAM_ERROR", 0x80),
        ("BAD_PAGE", 0x81)]
    assert all(int(s) < 0x100 for s in isa.Status)        # STATUS keeps the last error in 8 bits


def test_configs_load_and_derive():
    cfg = isa.load_config("default")
    assert (cfg.lanes, cfg.k_max, cfg.n_max) == (32, cfg.in_buf_bytes // (2 * cfg.rows),
                                                cfg.out_buf_bytes // (4 * cfg.rows))
    with pytest.raises(FileNotFoundError, match="known"):
        isa.load_config("no-such-config")
    with pytest.raises(ValueError, match="lanes"):
        isa.DeviceConfig(name="x", lanes=16, rows=1, num_queues=1, in_buf_bytes=4096,
                         out_buf_bytes=4096, dram_buf_bytes=1024)


def test_softmax_lanes_must_leave_the_input_port_free():
    # a line of 32 lanes: 8 softmax lanes (4 words a line) and fewer pass; 16 (2 words a
    # line: its writes 7 cycles after a word, 1 mod 2) and 32 (a read every cycle) would
    # put a read and a write on an input bank's one port in one cycle; 12 is no power of two
    cfg = isa.load_config("default")
    assert [dataclasses.replace(cfg, softmax_lanes=n).softmax_lanes for n in (2, 4, 8)] == [2, 4, 8]
    assert dataclasses.replace(cfg, softmax_lanes=0).softmax_lanes == cfg.lanes // 4
    for bad, why in ((16, "one cycle"), (32, "one cycle"), (12, "power of two"), (64, "power of two")):
        with pytest.raises(ValueError, match=why):
            dataclasses.replace(cfg, softmax_lanes=bad)

"""Paths across blocks and fanout (area/flat_timing.py), on netlists written here in Yosys's
JSON form: a chain of gates that leaves one module and goes on in another is measured
whole, flip-flops and memories end paths, a wide net gets its buffer tree."""
import pytest

from area import flat_timing


def gate(kind, a, y, b=None):
    conns, dirs = {"A": [a], "Y": [y]}, {"A": "input", "Y": "output"}
    if b is not None:
        conns["B"], dirs["B"] = [b], "input"
    return {"type": kind, "port_directions": dirs, "connections": conns}


def flop(d, q):
    return {"type": "$_DFF_P_", "port_directions": {"C": "input", "D": "input", "Q": "output"},
            "connections": {"C": [2], "D": [d], "Q": [q]}}


def chain(first, n, start_bit=100):
    """n inverters from net `first`; returns (cells, last net)."""
    cells, net = {}, first
    for i in range(n):
        cells[f"g{i}"] = gate("$_NOT_", net, start_bit + i)
        net = start_bit + i
    return cells, net


def producer(levels):
    """A flop, then `levels` gates to the output port `o` (bit 3 inside)."""
    cells, last = chain(10, levels)
    cells["r"] = flop(5, 10)
    cells["out"] = gate("$_BUF_", last, 3)
    return {"ports": {"clk": {"direction": "input", "bits": [2]}, "o": {"direction": "output", "bits": [3]}},
            "cells": cells, "netnames": {"o": {"bits": [3], "hide_name": 0}}}


def consumer(levels):
    """The input port `i` (bit 3 inside) through `levels` gates into a flop."""
    cells, last = chain(3, levels)
    cells["r"] = flop(last, 50)
    return {"ports": {"clk": {"direction": "input", "bits": [2]}, "i": {"direction": "input", "bits": [3]}},
            "cells": cells, "netnames": {"i": {"bits": [3], "hide_name": 0}}}


def top(children):
    cells = {name: {"type": kind, "connections": conns} for name, (kind, conns) in children.items()}
    return {"ports": {"clk": {"direction": "input", "bits": [2]}}, "cells": cells, "netnames": {}}


def test_a_path_through_two_blocks_is_measured_whole():
    modules = {"p": producer(3), "c": consumer(4),
               "t": top({"a": ("p", {"clk": [2], "o": [7]}), "b": ("c", {"clk": [2], "i": [7]})})}
    got = flat_timing.analyse(modules, "t", set())
    # 3 gates + the output buffer in the producer, 4 in the consumer
    assert got["levels"] == 8
    assert got["through"] == [["a", 4], ["b", 4]]


def test_flops_and_memories_end_paths():
    mem = {"type": "$mem_v2", "port_directions": {"RD_ADDR": "input", "RD_DATA": "output"},
           "connections": {"RD_ADDR": [104], "RD_DATA": [200]}}
    cells, last = chain(10, 5)          # 5 gates into the memory's address
    after, _ = chain(200, 2, start_bit=300)     # its data through 2 gates
    modules = {"t": {"ports": {"x": {"direction": "input", "bits": [10]}},
                     "cells": {**cells, "m": mem, **{f"h{k}": v for k, v in after.items()}}, "netnames": {}}}
    assert flat_timing.analyse(modules, "t", {"$mem_v2"})["levels"] == 5


# sinks -> buffer levels: a tree of fanout-4 stages, its last stage the driving gate's own
@pytest.mark.parametrize("sinks,extra", [(4, 0), (5, 1), (16, 1), (17, 2), (100, 3), (2048, 5)])
def test_a_wide_net_is_buffered(sinks, extra):
    cells = {f"s{i}": gate("$_NOT_", 10, 1000 + i) for i in range(sinks)}
    cells["r"] = flop(5, 10)
    modules = {"t": {"ports": {"clk": {"direction": "input", "bits": [2]}}, "cells": cells,
                     "netnames": {"wide": {"bits": [10], "hide_name": 0}}}}
    got = flat_timing.analyse(modules, "t", set())
    assert got["levels"] == 1 and got["buffered_levels"] == 1 + extra
    assert got["max_fanout"] == sinks and got["max_fanout_net"] == "t.wide[0]"
    assert got["nets_over_limit"] == (1 if sinks > flat_timing.FANOUT_LIMIT else 0)


def test_a_combinational_loop_is_an_error():
    modules = {"t": {"ports": {}, "cells": {"a": gate("$_NOT_", 1, 2), "b": gate("$_NOT_", 2, 1)}, "netnames": {}}}
    with pytest.raises(RuntimeError, match="combinational loop"):
        flat_timing.analyse(modules, "t", set())

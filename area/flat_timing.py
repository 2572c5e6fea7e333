"""Paths across module boundaries and the fanout of every net, on the whole design.

`ltp -noff` in area/synth.py measures each module's own logic with its submodules made
path ends, so a path that leaves one block combinationally and goes on in the next (a
block's output decoded by its consumer in the same cycle) is cut at the boundary and
never measured whole; run on the flattened design, ltp's recursion exhausts yowasp's
stack. Here the timing copy of the netlist (2-input gates after abc's delay mapping,
`write_json`) is flattened in Python and every path measured end to end:

- sources: flip-flop outputs, memory read data, FP cell outputs (their own stages are
  hw/depth.py's), the design's inputs, constants;
- a gate is one level, as ltp counts it; flip-flops, memories and FP cells end paths;
- the longest path: its gate levels and the blocks it runs through, with the levels spent
  in each (so a path that is long only because it crosses blocks shows as such).

Fanout: a net's sinks (gate inputs, flip-flop, memory and FP cell inputs, outputs of the
design). Gate levels as area/report.py times them (20 ps, 1-1.5 FO4) assume a gate drives
about FANOUT_PER_LEVEL others; a net of fanout F above it needs a buffer tree of
ceil(log_4 F) - 1 more levels (BUFFER_FANOUT a buffer). The report gives the nets above
FANOUT_LIMIT and the longest path with each net's buffering added (`buffered_levels`).
"""
from collections import defaultdict
from typing import Any

FANOUT_PER_LEVEL = 4        # sinks a gate level drives in the 20 ps a level (FO4)
BUFFER_FANOUT = 4           # sinks per buffer of a buffer tree
FANOUT_LIMIT = 64           # nets above this are listed in the report

# clock pins: the clock tree is no net of the logic's (its buffering is the clock tree's)
CLOCK_PORTS = {"C", "CLK", "RD_CLK", "WR_CLK", "clk"}
# abc -g's gates (ltp counts each cell a level; inverters and buffers too)
_ENDPOINT_PREFIXES = ("$_DFF", "$_SDFF", "$_DFFE", "$_SDFFE", "$_SDFFCE", "$_ALDFF", "$_DFFSR", "$_DLATCH",
                      "$_SR_")


def buffer_levels(fanout: int) -> int:
    """Gate levels a buffer tree adds to a net of `fanout` sinks: ceil(log_4 fanout) - 1,
    in integers (a float log rounds 4^k up)."""
    levels, reach = 0, FANOUT_PER_LEVEL
    while reach < fanout:
        reach *= BUFFER_FANOUT
        levels += 1
    return levels


def _flatten(modules: dict[str, Any], top: str) -> tuple[list[tuple[str, str, list[Any], list[Any]]], list[Any],
                                                           dict[int, str]]:
    """The design's leaf cells as (type, instance path, input nets, output nets), nets as
    global ids (ints) or constants ("0", "1", "x", "z"); the top's output nets; a name of
    each net that has one (block.signal[bit])."""
    cells: list[tuple[str, str, list[Any], list[Any]]] = []
    names: dict[int, str] = {}
    next_id = [0]

    def fresh() -> int:
        next_id[0] += 1
        return next_id[0]

    def port_dirs(kind: str, cell: dict[str, Any]) -> dict[str, str]:
        if kind in modules:
            return {p: v["direction"] for p, v in modules[kind]["ports"].items()}
        return cell.get("port_directions", {})

    top_map: dict[int, Any] = {}
    outputs: list[Any] = []
    for port in modules[top]["ports"].values():
        for bit in port["bits"]:
            if isinstance(bit, int):
                top_map.setdefault(bit, fresh())
            if port["direction"] != "input":
                outputs.append(top_map.get(bit, bit) if isinstance(bit, int) else bit)
    stack: list[tuple[str, str, dict[int, Any]]] = [(top, "", top_map)]
    while stack:
        name, path, net_map = stack.pop()

        def net(bit: Any, net_map: dict[int, Any] = net_map) -> Any:
            if not isinstance(bit, int):
                return bit
            if bit not in net_map:
                net_map[bit] = fresh()
            return net_map[bit]
        for net_name, info in modules[name].get("netnames", {}).items():
            if not info.get("hide_name"):
                for i, bit in enumerate(info["bits"]):
                    if isinstance(bit, int):
                        names.setdefault(net(bit), f"{path or top}.{net_name}[{i}]")
        for cell_name, cell in modules[name]["cells"].items():
            kind = cell["type"]
            dirs = port_dirs(kind, cell)
            conns = cell["connections"]
            if kind in modules and not modules[kind].get("attributes", {}).get("blackbox"):
                child_map: dict[int, Any] = {}
                for port, bits in conns.items():
                    for local, bit in zip(modules[kind]["ports"][port]["bits"], bits, strict=True):
                        if isinstance(local, int):
                            child_map[local] = net(bit)
                instance = cell_name.lstrip("\\")
                stack.append((kind, f"{path}.{instance}" if path else instance, child_map))
                continue
            ins = [net(b) for p, bits in conns.items() if dirs.get(p) == "input" and p not in CLOCK_PORTS
                   for b in bits]
            outs = [net(b) for p, bits in conns.items() if dirs.get(p) == "output" for b in bits]
            cells.append((kind, path, ins, outs))
    return cells, outputs, names


def analyse(modules: dict[str, Any], top: str, endpoint_types: set[str]) -> dict[str, Any]:
    """The longest path of the flattened design (gate levels, with buffering, the blocks it
    runs through) and its high-fanout nets. `endpoint_types`: cell types that end paths
    besides flip-flops (FP cells, `$mem_v2`)."""
    cells, outputs, names = _flatten(modules, top)
    fanout: dict[Any, int] = defaultdict(int)       # constants are no nets
    for _, _, ins, _ in cells:
        for n in ins:
            if isinstance(n, int):
                fanout[n] += 1
    for n in outputs:
        if isinstance(n, int):
            fanout[n] += 1

    def is_gate(kind: str) -> bool:
        return (kind.startswith("$_") and not kind.startswith(_ENDPOINT_PREFIXES)
                and kind not in endpoint_types)
    gates = [c for c in cells if is_gate(c[0]) and c[3]]
    driver: dict[Any, int] = {}
    for g, (_, _, _, outs) in enumerate(gates):
        for n in outs:
            driver[n] = g
    # longest arrival (levels, and with buffer trees) at each gate's output, in topological
    # order (Kahn): a gate waits for the gates that drive its inputs
    waiting = [0] * len(gates)
    users: dict[int, list[int]] = defaultdict(list)
    for g, (_, _, ins, _) in enumerate(gates):
        for n in set(ins):
            if n in driver:
                waiting[g] += 1
                users[driver[n]].append(g)
    level = [0] * len(gates)
    buffered = [0] * len(gates)
    before = [-1] * len(gates)
    ready = [g for g in range(len(gates)) if waiting[g] == 0]
    done = 0
    while ready:
        g = ready.pop()
        done += 1
        kind, _, ins, outs = gates[g]
        best, best_b, prev = 0, 0, -1
        for n in ins:
            d = driver.get(n)
            if d is not None:
                if level[d] > best:
                    best, prev = level[d], d
                best_b = max(best_b, buffered[d])
            elif isinstance(n, int):            # a register's (or an input's) broadcast
                best_b = max(best_b, buffer_levels(fanout[n]))
        level[g], before[g] = best + 1, prev
        buffered[g] = best_b + 1 + max((buffer_levels(fanout[n]) for n in outs), default=0)
        for u in users[g]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if done != len(gates):
        raise RuntimeError(f"{top}: a combinational loop among {len(gates) - done} gates")
    worst = max(range(len(gates)), key=level.__getitem__, default=-1)
    through: list[list[Any]] = []          # [block, levels in it], in path order
    g = worst
    while g >= 0:
        block = gates[g][1] or top
        if through and through[-1][0] == block:
            through[-1][1] += 1
        else:
            through.append([block, 1])
        g = before[g]
    through.reverse()
    wide = sorted((f for f in fanout.values() if f > FANOUT_LIMIT), reverse=True)
    widest = max(fanout, key=fanout.__getitem__, default=None)
    return {"levels": level[worst] if worst >= 0 else 0,
            "buffered_levels": max(buffered, default=0),
            "through": through, "start": through[0][0] if through else "", "end": through[-1][0] if through else "",
            "gates": len(gates), "fanout_limit": FANOUT_LIMIT, "nets_over_limit": len(wide),
            "max_fanout": max(fanout.values(), default=0), "max_fanout_net": names.get(widest, "") if widest else "",
            "max_fanout_buffer_levels": buffer_levels(max(fanout.values(), default=0))}

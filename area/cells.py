"""The 45 nm standard cells the synthesis maps to, and their Liberty file.

Areas are those of the Nangate 45 nm Open Cell Library (FreePDK45), X1 drive: its cells
are whole multiples of one placement site, 0.19 um x 1.4 um = 0.266 um^2 (LEF `SITE
FreePDK45_38x28_10R_NP_162NW_34O`), and the widths below are the library's LEF `SIZE`s
in sites. Three of them are quoted in issue 13 from the LEF: NAND2_X1 0.798 um^2 (3
sites), DFF_X1 4.522 (17), FA_X1 4.256 (16); the others follow the same site rule.
No delays, no power: the file only carries area and function (abc maps for area with it,
`stat -liberty` sums it). Multi-output cells (FA_X1, HA_X1) are listed for reference but
left out of the Liberty file: abc maps to single-output cells.
"""
SITE_UM2 = 0.19 * 1.4
# the timing assumption (hw/depth.py): at 45 nm an FO4 inverter is about 15-20 ps and a
# 2-input gate level about 1-1.5 FO4: 20 ps a level; flop clock-to-Q, setup and skew 100 ps
T_LEVEL_PS = 20.0
T_SEQ_PS = 100.0

# name: (sites, inputs, output, Liberty function); DFF_X1 is the flip-flop
CELLS = {
    "INV_X1": (2, ("A",), "ZN", "!A"),
    "BUF_X1": (3, ("A",), "Z", "A"),
    "NAND2_X1": (3, ("A1", "A2"), "ZN", "!(A1 & A2)"),
    "NOR2_X1": (3, ("A1", "A2"), "ZN", "!(A1 | A2)"),
    "AND2_X1": (4, ("A1", "A2"), "ZN", "(A1 & A2)"),
    "OR2_X1": (4, ("A1", "A2"), "ZN", "(A1 | A2)"),
    "AOI21_X1": (4, ("A", "B1", "B2"), "ZN", "!(A | (B1 & B2))"),
    "OAI21_X1": (4, ("A", "B1", "B2"), "ZN", "!(A & (B1 | B2))"),
    "XOR2_X1": (6, ("A", "B"), "Z", "(A ^ B)"),
    "XNOR2_X1": (6, ("A", "B"), "ZN", "!(A ^ B)"),
    "MUX2_X1": (7, ("A", "B", "S"), "Z", "((S & B) | (A & !S))"),
}
FLOP = "DFF_X1"
FLOP_SITES = 17
REFERENCE_ONLY = {"FA_X1": 16, "HA_X1": 10}


def area(name: str) -> float:
    """A cell's area in um^2."""
    sites = FLOP_SITES if name == FLOP else CELLS[name][0] if name in CELLS else REFERENCE_ONLY[name]
    return round(sites * SITE_UM2, 6)


def liberty() -> str:
    """The Liberty text: the combinational cells and the flip-flop, area in um^2."""
    out = ["library (ndp45) {", "  delay_model : table_lookup;", '  time_unit : "1ns";',
           "  capacitive_load_unit (1, pf);"]
    for name, (_, inputs, output, function) in CELLS.items():
        out.append(f"  cell ({name}) {{")
        out.append(f"    area : {area(name)};")
        out += [f"    pin ({pin}) {{ direction : input; }}" for pin in inputs]
        out.append(f'    pin ({output}) {{ direction : output; function : "{function}"; }}')
        out.append("  }")
    out += [f"  cell ({FLOP}) {{", f"    area : {area(FLOP)};",
            "    ff (IQ, IQN) { clocked_on : CK; next_state : D; }",
            "    pin (D) { direction : input; }", "    pin (CK) { direction : input; clock : true; }",
            '    pin (Q) { direction : output; function : "IQ"; }', "  }", "}"]
    return "\n".join(out) + "\n"

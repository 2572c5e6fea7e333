"""Area, power and timing of the NDP core from its own RTL at 45 nm (docs/area.md): a cell
library written from published cell areas (`cells.py`), hierarchical logic synthesis with
the memories kept out (`synth.py`), every block's row and the scaling of large configs
(`blocks.py`), the memories as CACTI 7 SRAM macros (`sram.py`), power from energies per
operation times a workload's activity on the cycle model (`power.py`), and the report
beside the paper's figures (`report.py`, `plora area`, `make area`)."""

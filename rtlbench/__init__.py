"""The RTL benches: the Verilator runner (runner.py), the cocotb environment around
`ndp_device` (env.py, the AXI protocol checker axi_checker.py) and the fast co-simulation
top (fast/, cocotb_fast.py), the backends of the scenarios (backend.py), the scenarios
written once (scenarios.py), the random streams (stream.py), and the tools users run through
the `plora` CLI: `plora demo`, `plora validate`, `plora roofline`, `plora bench`
(demo.py, validate.py, roofline.py, bench.py), and the model's figures and speed through the
driver (figures.py: `make figures`; speed.py). The cocotb test modules (cocotb_*.py) run
inside the simulator; tests/rtl holds the pytest entry points."""

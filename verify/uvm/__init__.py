"""A pyuvm environment around the device, in the shape of pyuvm's TinyALU example: sequence
items (items.py), sequences (sequences.py), a driver (driver.py), a monitor (monitor.py), a
scoreboard (scoreboard.py), functional coverage (coverage.py), the env and its tests
(env.py). It runs on either RTL top through the backends of rtlbench (the cocotbext-axi
bench or the fast path) and the project's driver; verify/cocotb_uvm.py holds the cocotb
entry points, `make verify` and tests/rtl/test_uvm.py run them."""

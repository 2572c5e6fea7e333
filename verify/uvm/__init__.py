"""A pyuvm environment around the device, in the shape of pyuvm's TinyALU example: sequence
items, one class per host action (items.py), sequences (sequences.py), a driver that
dispatches on the item's type (driver.py), a monitor that watches the transport from
outside (monitor.py), a scoreboard (scoreboard.py) and functional coverage (coverage.py),
both fed by the driver and the monitor, the env and its tests (env.py), whose top puts the
run's settings (verify/settings.py) in ConfigDB. It runs on either RTL top through the
backends of rtlbench (the cocotbext-axi bench or the fast path) and the project's driver;
verify/cocotb_uvm.py holds the cocotb entry points, `make verify` and
tests/rtl/test_verify.py run them."""

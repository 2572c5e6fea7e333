"""Constants of the microarchitecture that the RTL (`hw/`) and the cycle model (`sim/`)
share: defined once here, imported by both, so a change reaches the model with the RTL.

Sizes that follow from a device config are `isa.config.DeviceConfig` properties instead.
"""

WRITES_IN_FLIGHT = 16        # write bursts the control unit's writer posts before a response
HOST_BURSTS_IN_FLIGHT = 4    # CXL.mem bursts the host path keeps on the internal bus per direction
REPORTS_IN_FLIGHT = 4        # completion lines written and awaiting their response (HEAD, irq after)
PRODUCT_CYCLES = 3           # a chunk entering the PE array -> its products registered (fetch, multiply)
ADD_CYCLES = 3               # an FP32 add: its operands -> its sum registered

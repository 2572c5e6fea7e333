"""Constants of the microarchitecture that the RTL (`hw/`) and the cycle model (`sim/`)
share: defined once here, imported by both, so a change reaches the model with the RTL.

Sizes that follow from a device config are `isa.config.DeviceConfig` properties instead.
"""

WRITES_IN_FLIGHT = 16        # write bursts the control unit's writer posts before a response
HOST_BURSTS_IN_FLIGHT = 4    # CXL.mem bursts the host path keeps on the internal bus per direction
REPORTS_IN_FLIGHT = 4        # completion lines written and awaiting their response (HEAD, irq after)
PRODUCT_CYCLES = 3           # a chunk entering the PE array -> its products registered (fetch, multiply)
ADD_CYCLES = 3               # an FP32 add: its operands -> its sum registered
PIPE_DEPTH = PRODUCT_CYCLES + ADD_CYCLES     # a chunk -> its sums visible in the accumulators
VALID_WORD_BACKOFF = 32      # the command engine: cycles between two reads of a valid word that did not match
FOLD_FIFO_DEPTH = 8          # the fold unit: words between its adder and the consumer (a power of two)
PACKER_BUFFER_LINES = 3      # the line packer: two lines of a word at any offset, and the line going out
UNPACKER_WINDOW_BEATS = 3    # the unpacker: a pair spans up to 2 LANES elements from any position in a beat
SOFTMAX_EXP_DRAIN = 4        # the softmax unit's exp pass drains: d, exp stage 1, exp stage 2, accumulate
SOFTMAX_OUT_DRAIN = 5        # ... its output pass: d, exp stage 1, exp stage 2, product stage 1, product stage 2
DECODE_STAGES = 3            # the front end's decode (hw/decoder.py): products, their lines, the verdict
PAGE_LIST_MAX = 64           # entries of a paged ATTENTION's list the front end holds (its page table)
LANE_ROW_STAGES = 3          # the lanes' j // N: registered steps after N changes; a stage's PLAN waits for them

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
# the softmax unit (hw/softmax_unit.py): each step ends in a register, no path through more
# than one FP unit's stage or SOFTMAX_MAX_LEVELS comparator levels of its max tree
SOFTMAX_MAX_LEVELS = 3       # comparator levels of the max tree between two of its registers
SOFTMAX_EXP_CYCLES = 3       # the exp cell's stages (hw/fp_sfu.py EXP_STAGES)
SOFTMAX_MULH_CYCLES = 2      # the e * (1 / l) -> FP16 cell's stages (hw/fp_sfu.py MULH_STAGES)
SOFTMAX_E_AT = 1 + ADD_CYCLES + SOFTMAX_EXP_CYCLES      # a word read -> its e registered: x - m, exp
SOFTMAX_EXP_DRAIN = SOFTMAX_E_AT + ADD_CYCLES - 1       # ... -> the last word's e in its lane's sum
SOFTMAX_OUT_DRAIN = SOFTMAX_E_AT + SOFTMAX_MULH_CYCLES - 1     # ... -> its FP16 output presented, less 1


def softmax_max_stages(lanes: int) -> int:
    """Registered stages of the softmax unit's max tree over `lanes` lanes: the lanes' keys
    registered (their source is the control unit's choice of word and its FP16 widening),
    then log2(lanes) comparator levels, SOFTMAX_MAX_LEVELS a stage (at least one: the
    word's max registered)."""
    levels = lanes.bit_length() - 1
    return 1 + max(1, -(-levels // SOFTMAX_MAX_LEVELS))


def softmax_lines_clear(words_a_line: int) -> bool:
    """Whether the softmax unit, reading a line (of `words_a_line` of its words) every
    `words_a_line` cycles and writing its outputs back a line at a time, never reads and
    writes in one cycle: SOFTMAX runs in place on an input bank of one read-write port.
    A line's write comes with its last word's output, SOFTMAX_E_AT cycles after that word
    was taken (partial) or SOFTMAX_E_AT + SOFTMAX_MULH_CYCLES - 1 (normalized); a line's
    read comes with its first word, so the two meet when that delay is 1 mod the words a
    line (and always with one word a line)."""
    lags = (SOFTMAX_E_AT, SOFTMAX_E_AT + SOFTMAX_MULH_CYCLES - 1)
    return words_a_line > 1 and all(lag % words_a_line != 1 for lag in lags)


DECODE_STAGES = 3            # the front end's decode (hw/decoder.py): products, their lines, the verdict
TASK_QUEUE = 2               # the front end's tasks for the control unit: moved into slot 1, not yet taken
PAGE_LIST_MAX = 64           # entries of a paged ATTENTION's list the front end holds (its page table)
LANE_ROW_STAGES = 3          # the lanes' j // N: registered steps after N changes; a stage's PLAN waits for them

"""Model of hw/dram_arbiter.py's read side as the command engine meets the reader.

The arbiter grants one read burst per pick, round-robin, and presents the granted AR the
next cycle (its handshake); responses return in the order of the handshakes. So a
command-engine read asking from cycle `request` is picked in the first cycle the arbiter
is not presenting a reader burst, ahead of a reader burst asking in the same cycle unless
the engine had the last grant; its line comes `dram_read_latency` cycles after its
handshake and after the beats of the reader bursts issued before it. The reader's side of
the same rule (its bursts not picked in the read's pick or handshake cycle, their beats
after the read's) is sim/dram_reader.py's `steals`.
"""


def engine_grant(request, bursts, control_first, cfg):
    """(handshake, beat) of a command-engine read asking from `request`, among the reader
    bursts `bursts` ((handshake, last beat) each) already scheduled; `control_first`: the
    engine had the last grant, so a reader burst picked in the same cycle goes first. With
    several channels the line comes through the interleaver (sim/dram_interleaver.py): its
    channel's part a cycle after the handshake, the beat a cycle after the line; its
    channel's earlier lines all belong to beats before it, so they never make it later."""
    latency = cfg.dram_read_latency + (2 if cfg.dram_channels > 1 else 0)
    handshakes = {h for h, _ in bursts}
    pick = request
    while True:
        if pick in handshakes:
            pick += 1
        elif control_first and pick + 1 in handshakes:
            pick, control_first = pick + 2, False
        else:
            break
    handshake = pick + 1
    earlier = [last for h, last in bursts if h < handshake]
    beat = max(handshake + latency, max(earlier) + 1 if earlier else 0)
    return handshake, beat

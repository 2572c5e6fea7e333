"""Model of hw/dram_interleaver.py: the internal bus onto C channel ports (C > 1).

Reads (computed in sim/dram_reader.py's compiled loop, which holds each channel's last
line): a burst whose address handshake is at h sends each channel its part at h + 1; a
channel answers `dram_read_latency` cycles after that and after its earlier lines, one
line per cycle; a beat of the internal bus goes up the cycle after its last line came in,
and after the beat before it.

Writes (`WriteChannels`): a burst whose address handshake is at h sends each channel it
touches its address at h + 1 (after the channel's previous one); a line of the internal
beat taken at w is in its bank from w + 1, and the channel sends it then, once its
address has gone (from the cycle after) and after its previous line; the channel answers
`dram_write_latency` cycles after the part's last line, after its previous answer; the
burst's answer comes the cycle after the last of its channels' answers, after the
previous burst's.
"""
NEVER = -(1 << 40)


def channel_of(line, channels):
    """The channel of a 64-byte line (its index): 256-byte granules, round-robin."""
    return (line >> 2) % channels


class WriteChannels:
    """Each channel's last address, line and answer, across bursts."""

    def __init__(self, cfg):
        self.channels, self.latency = cfg.dram_channels, cfg.dram_write_latency
        self.aw = [NEVER] * self.channels
        self.w = [NEVER] * self.channels
        self.b = [NEVER] * self.channels

    def copy(self):
        new = WriteChannels.__new__(WriteChannels)
        new.channels, new.latency = self.channels, self.latency
        new.aw, new.w, new.b = list(self.aw), list(self.w), list(self.b)
        return new

    def burst(self, handshake, first_line, lines, beat_times):
        """The cycle the last of the channels' answers to a burst comes (the join answers
        the next cycle): its address handshake, its first line (index) and lines, and the
        cycle each of its beats of the internal bus was taken."""
        n = self.channels
        answered = NEVER
        base = first_line // n
        last_line = first_line + lines - 1
        touched = []
        for line in range(first_line, last_line + 1):
            c = channel_of(line, n)
            if not touched or touched[-1] != c:
                touched.append(c)
                self.aw[c] = max(handshake + 1, self.aw[c] + 1)
            beat = max(beat_times[line // n - base] + 1, self.aw[c] + 1, self.w[c] + 1)
            self.w[c] = beat
            if line == last_line or channel_of(line + 1, n) != c:
                self.b[c] = max(beat + self.latency, self.b[c] + 1)
                answered = max(answered, self.b[c])
        return answered

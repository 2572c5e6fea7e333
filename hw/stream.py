"""Valid/ready streams: bus beats, as the DRAM reader produces them, and lines with byte
strobes, as the DRAM writer takes them."""
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class BeatStream(wiring.Signature):
    def __init__(self, width):
        super().__init__({"data": Out(width), "valid": Out(1), "ready": In(1)})


class LineStream(wiring.Signature):
    def __init__(self, width):
        super().__init__({"data": Out(width), "strb": Out(width // 8), "valid": Out(1), "ready": In(1)})

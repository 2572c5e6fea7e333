"""A valid/ready stream of bus beats, as the DRAM reader produces and the writer takes."""
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class BeatStream(wiring.Signature):
    def __init__(self, width):
        super().__init__({"data": Out(width), "valid": Out(1), "ready": In(1)})

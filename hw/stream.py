"""Valid/ready streams (amaranth.lib.stream) of the memory side, and their payloads: bus
beats with their error bit (RRESP SLVERR or DECERR), as the DRAM reader produces them,
and lines with byte strobes, as the DRAM writer takes them. (stream.Signature is final:
functions, not subclasses.)"""
from amaranth.lib import data, stream


def beat_layout(width):
    """A DRAM beat and whether it was answered with an error."""
    return data.StructLayout({"data": width, "err": 1})


def line_layout(width):
    """A line and its byte strobes."""
    return data.StructLayout({"data": width, "strb": width // 8})


def beat_stream(width):
    return stream.Signature(beat_layout(width))


def line_stream(width):
    return stream.Signature(line_layout(width))

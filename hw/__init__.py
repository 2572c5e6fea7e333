"""Amaranth sources of the NDP core. One block per file; `device.NdpDevice` assembles them."""

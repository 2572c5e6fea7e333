"""The errors of a bad host-side argument, found before a device is touched: the
descriptor encoders (isa/encoders.py) raise them, and so does the host driver (driver/),
whose own errors (driver/errors.py) derive from `NdpError` too.

Argument errors also derive from `ValueError`, so callers that validate their own input
the ordinary Python way catch them too.
"""
import operator
from typing import Any

import numpy as np


class NdpError(Exception):
    """Base of every error the driver and the encoders raise."""


class ArgumentError(NdpError, ValueError):
    """A bad host-side argument, found before the device is touched."""


def count_arg(value: Any, name: str, minimum: int = 0) -> int:
    """An integer argument (bool refused) of at least `minimum`; ArgumentError naming it."""
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{name} must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ArgumentError(f"{name} must be an integer, got {type(value).__name__!r}") from None
    if value < minimum:
        raise ArgumentError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def index_arg(value: Any, name: str, count: int) -> int:
    """An integer argument in range(count); ArgumentError naming it."""
    value = count_arg(value, name)
    if value >= count:
        raise ArgumentError(f"{name} {value!r} is not in range({count!r})")
    return value


class ShapeError(ArgumentError):
    """Array shapes or sizes that disagree with each other or with the device's limits."""

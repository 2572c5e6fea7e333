"""Adapter temperatures (seed 000, section VI-A): 'each new request raises its adapter's
temperature by a fixed increment, all temperatures relax toward the system average by 0.1
of the gap per step, and PLoRA pre-caches the 50 hottest non-serving adapters'.

The temperatures are one float64 array in registration order, so a step's relaxation is
three array operations instead of a loop over every registered adapter. Each element sees
the same IEEE operations as the scalar rule, t + relaxation * (mean - t), and the mean is
Python's sum over the values in registration order, so the values are the scalar rule's to
the bit."""
import numbers
import sys
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

_INT64 = (-(1 << 63), 1 << 63)


def _python_sum(values: npt.NDArray[np.float64]) -> float:
    """sum(values.tolist()), bit for bit: before 3.12 Python's sum adds floats left to right,
    as np.cumsum does; from 3.12 on it compensates (Neumaier), so ask it."""
    if sys.version_info < (3, 12):
        return float(np.cumsum(values)[-1])
    return float(sum(values.tolist()))


class Temperatures:
    def __init__(self, increment: float, relaxation: float) -> None:
        self.increment, self.relaxation = increment, relaxation
        self._pos: dict[int, int] = {}  # adapter -> its index; every registered adapter
        self._keys: list[int] = []      # the adapters in registration order
        self._v = np.zeros(64)          # temperatures, [:len(self._keys)] in use
        self._ids = np.zeros(64, np.int64)  # the adapter ids, for ties (while all are integers)
        self._int_ids = True
        self._ids_sorted = True         # registered in increasing id order: index order is id order
        self.version = 0                # changes whenever a temperature or the set of adapters does
        # (version, count, exclude, result) of the last hottest()
        self._hottest: tuple[int, int, frozenset[int], tuple[int, ...]] | None = None

    def register(self, adapter: int) -> None:
        """A new adapter starts at 0: never requested, the coldest."""
        if adapter in self._pos:
            return
        n = len(self._keys)
        if n == len(self._v):
            self._v = np.concatenate((self._v, np.zeros(n)))
            self._ids = np.concatenate((self._ids, np.zeros(n, np.int64)))
        self.version += 1
        self._pos[adapter] = n
        self._keys.append(adapter)
        self._v[n] = 0.0
        if (self._int_ids and isinstance(adapter, numbers.Integral) and not isinstance(adapter, bool)
                and _INT64[0] <= int(adapter) < _INT64[1]):
            self._ids[n] = adapter
            self._ids_sorted = self._ids_sorted and (n == 0 or self._ids[n - 1] < adapter)
        else:
            self._int_ids = False

    def __getitem__(self, adapter: int) -> float:
        return float(self._v[self._pos[adapter]])

    def __contains__(self, adapter: object) -> bool:
        return adapter in self._pos

    def __len__(self) -> int:
        return len(self._keys)

    def mean(self) -> float:
        n = len(self._keys)
        return _python_sum(self._v[:n]) / n if n else 0.0

    def arrive(self, adapter: int) -> None:
        """A new request for `adapter`."""
        self.register(adapter)
        self.version += 1
        i = self._pos[adapter]
        self._v[i] = float(self._v[i]) + self.increment

    def relax(self) -> None:
        """One step: every temperature moves `relaxation` of its gap toward the mean (the
        mean itself is unchanged by the move)."""
        n = len(self._keys)
        if not n:
            return
        self.version += 1
        mean = self.mean()
        v = self._v[:n]
        v[:] = v + self.relaxation * (mean - v)

    def hottest(self, count: int, exclude: Iterable[int] = ()) -> list[int]:
        """The `count` hottest adapters not in `exclude`, hottest first (ties by id)."""
        excluded = frozenset(exclude)
        last = self._hottest
        if last is not None and last[:3] == (self.version, count, excluded):
            return list(last[3])
        out = self._rank(count, excluded)
        self._hottest = (self.version, count, excluded, tuple(out))
        return out

    def _rank(self, count: int, exclude: frozenset[int]) -> list[int]:
        n = len(self._keys)
        if not self._int_ids or not isinstance(count, int) or count < 0:
            ranked = sorted((a for a in self._keys if a not in exclude), key=lambda a: (-self[a], a))
            return ranked[:count]
        if not count or not n:
            return []
        # only the top count + |exclude| of the ranking can be returned: sort just those, the
        # ones hotter than the k-th hottest and the lowest ids of those as hot as it
        k = count + len(exclude)
        neg = -self._v[:n]
        if k < n:
            kth = np.partition(neg, k - 1)[k - 1]
            hotter, tied = np.flatnonzero(neg < kth), np.flatnonzero(neg == kth)
            rest = k - hotter.size
            if tied.size > rest:
                tied = tied[:rest] if self._ids_sorted else tied[np.argsort(self._ids[tied], kind="stable")[:rest]]
            cand = np.concatenate((hotter, tied))
            order = cand[np.lexsort((self._ids[cand], neg[cand]))]
        else:
            order = np.lexsort((self._ids[:n], neg))
        out = []
        keys = self._keys
        for i in order.tolist():
            a = keys[i]
            if a not in exclude:
                out.append(a)
                if len(out) == count:
                    break
        return out

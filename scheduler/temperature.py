"""Adapter temperatures (seed 000, section VI-A): 'each new request raises its adapter's
temperature by a fixed increment, all temperatures relax toward the system average by 0.1
of the gap per step, and PLoRA pre-caches the 50 hottest non-serving adapters'."""


class Temperatures:
    def __init__(self, increment, relaxation):
        self.increment, self.relaxation = increment, relaxation
        self._t = {}                    # adapter -> temperature; every registered adapter

    def register(self, adapter):
        """A new adapter starts at 0: never requested, the coldest."""
        self._t.setdefault(adapter, 0.0)

    def __getitem__(self, adapter):
        return self._t[adapter]

    def __contains__(self, adapter):
        return adapter in self._t

    def __len__(self):
        return len(self._t)

    def mean(self):
        return sum(self._t.values()) / len(self._t) if self._t else 0.0

    def arrive(self, adapter):
        """A new request for `adapter`."""
        self.register(adapter)
        self._t[adapter] += self.increment

    def relax(self):
        """One step: every temperature moves `relaxation` of its gap toward the mean (the
        mean itself is unchanged by the move)."""
        mean = self.mean()
        for adapter, t in self._t.items():
            self._t[adapter] = t + self.relaxation * (mean - t)

    def hottest(self, count, exclude=()):
        """The `count` hottest adapters not in `exclude`, hottest first (ties by id)."""
        exclude = set(exclude)
        ranked = sorted((a for a in self._t if a not in exclude), key=lambda a: (-self._t[a], a))
        return ranked[:count]

"""A paper's claim beside the simulator's figure: the row of a reproduction table
(serving/reproduce.py for PLoRA, boost/reproduce.py for BOOST)."""
import dataclasses
import math


@dataclasses.dataclass
class Claim:
    what: str
    paper: float
    sim: float
    unit: str = ""
    why: str = ""                # the measured cause of a miss
    note: str = ""               # printed whatever the verdict: what an idealized baseline omits
    tolerance: float = 0.10      # the verdict's band; 0 for a count the paper states exactly ("every")

    @property
    def ratio(self) -> float:
        return self.sim / self.paper if self.paper else math.nan

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1) <= self.tolerance + 1e-12

    @property
    def verdict(self) -> str:
        if not self.within:
            return f"miss: {self.why}"
        return "exact" if self.tolerance == 0 else f"within {self.tolerance:.0%}"

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

    @property
    def ratio(self):
        return self.sim / self.paper if self.paper else math.nan

    @property
    def within(self):
        return abs(self.ratio - 1) <= 0.10

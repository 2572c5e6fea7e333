"""The Page Allocation Manager (PAM, seed 002 section 4.2) and the placements it is compared with.

A placement is a tier per page of one tensor (0: HBM, 1: the second tier). PAM's two:
- MPP, modulo page placement, for static tensors (weights): K = ceil(1/alpha) pages to HBM,
  then one to the second tier, restarting at every tensor (section 3.1: 'BOOST preserves
  per-kernel proportional access by allocating each weight tensor separately, so the
  placement pattern restarts at every tensor'); when a CTA's footprint does not align with
  pages, the unit is a superpage of lcm(footprint, page) bytes (section 4.4);
- LPP, linear placement, for the KV pool: the first 1/(alpha+1) of the pages on HBM, the
  rest on the second tier (section 4.2).
The alternatives: BAPP-R (each page on the second tier with probability alpha, section 2.6),
Linux weighted interleave (the same K:1 stripe, continued across tensors and blind to CTAs),
proportional interleave (LPP applied to every tensor, section 5.7) and HBM only.
"""
import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .config import check_alpha

HBM, SECOND = 0, 1
POLICIES = ("hbm", "boost", "mpp-pages", "bapp-r", "weighted", "proportional")
Tiers = npt.NDArray[np.int8]        # per page: HBM (0) or SECOND (1)


def _count(n: Any, what: str = "n_pages") -> int:
    if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0):
        raise ValueError(f"{what} must be an integer >= 0, got {n!r}")
    return int(n)


def _check_modulus(modulus: Any) -> int:
    if not (isinstance(modulus, (int, np.integer)) and not isinstance(modulus, bool) and modulus >= 2):
        raise ValueError(f"modulus must be an integer >= 2, got {modulus!r}")
    return int(modulus)


def mpp(n_pages: int, modulus: int, start: int = 0) -> Tiers:
    """Modulo placement of `n_pages` units: unit i goes to the second tier when
    (start + i) mod modulus == modulus - 1 (K = modulus - 1 to HBM, then one)."""
    n, m = _count(n_pages), _check_modulus(modulus)
    return ((start + np.arange(n)) % m == m - 1).astype(np.int8)


def lpp(n_pages: int, share: float) -> Tiers:
    """Linear placement: the last floor(n x share) pages on the second tier, the rest on HBM."""
    n = _count(n_pages)
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share!r}")
    tiers = np.zeros(n, dtype=np.int8)
    host = math.floor(n * share + 1e-9)
    if host:
        tiers[n - host:] = SECOND
    return tiers


def bapp_r(n_pages: int, alpha: float, rng: np.random.Generator) -> Tiers:
    """BAPP-R: every page on the second tier with probability alpha, independently."""
    n = _count(n_pages)
    return (rng.random(n) < check_alpha(alpha)).astype(np.int8)


def superpage_bytes(footprint_bytes: int, page_bytes: int) -> int:
    """The unit PAM places for a kernel whose CTAs each read `footprint_bytes` of contiguous
    weights: lcm(footprint, page), so that no CTA's footprint crosses a unit (section 4.4:
    'LCM(3.5MB, 2MB) = 14MB for Llama-70B down-projection'). A footprint that divides the page
    gives the page itself."""
    for name, v in (("footprint_bytes", footprint_bytes), ("page_bytes", page_bytes)):
        if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return math.lcm(int(footprint_bytes), int(page_bytes))


@dataclasses.dataclass(frozen=True)
class Placement:
    """The tier of every page of one tensor of `nbytes` bytes."""
    nbytes: int
    page_bytes: int
    tiers: np.ndarray

    def __post_init__(self) -> None:
        if len(self.tiers) != -(-self.nbytes // self.page_bytes):
            raise ValueError(f"a {self.nbytes}-byte tensor has {-(-self.nbytes // self.page_bytes)} pages of "
                             f"{self.page_bytes}, got {len(self.tiers)} tiers")

    @property
    def second_share(self) -> float:
        """The share of the tensor's bytes on the second tier."""
        if not self.nbytes:
            return 0.0
        return float(self.second_bytes_in(np.array([0]), np.array([self.nbytes]))[0] / self.nbytes)

    def second_bytes_in(self, start: npt.ArrayLike, end: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Bytes of [start, end) on the second tier, for arrays of ranges (vectorized)."""
        p = self.page_bytes
        cum = np.concatenate(([0], np.cumsum(self.tiers.astype(np.int64)) * p))
        tiers = np.concatenate((self.tiers, [0])).astype(np.int64)

        def below(x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
            page = x // p
            return cum[page] + tiers[page] * (x - page * p)
        return below(np.asarray(end, dtype=np.int64)) - below(np.asarray(start, dtype=np.int64))


class Pam:
    """Places the tensors of one allocation sequence under one policy.

    `place(nbytes, footprint)` allocates the next tensor; `footprint` is the contiguous bytes
    one CTA of the consuming kernel reads (superpages under "boost"). "weighted" continues its
    stripe where the previous tensor stopped; "bapp-r" draws from `rng`; the KV pool is placed
    by `place_pool` (LPP under "boost")."""

    def __init__(self, policy: str, modulus: int, page_bytes: int, rng: np.random.Generator | None = None,
                 alpha: float | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.policy, self.modulus, self.page_bytes = policy, _check_modulus(modulus), page_bytes
        self.alpha = check_alpha(alpha) if alpha is not None else 1 / self.modulus
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._stripe = 0            # weighted interleave: pages placed so far

    def _pages(self, nbytes: int) -> int:
        if not (isinstance(nbytes, (int, np.integer)) and nbytes >= 1):
            raise ValueError(f"tensor bytes must be an integer >= 1, got {nbytes!r}")
        return -(-int(nbytes) // self.page_bytes)

    def place(self, nbytes: int, footprint: int | None = None) -> Placement:
        n = self._pages(nbytes)
        if self.policy == "hbm":
            tiers = np.zeros(n, dtype=np.int8)
        elif self.policy == "boost" and footprint is not None:
            unit = superpage_bytes(footprint, self.page_bytes) // self.page_bytes
            tiers = np.repeat(mpp(-(-n // unit), self.modulus), unit)[:n]
        elif self.policy in ("boost", "mpp-pages"):
            tiers = mpp(n, self.modulus)
        elif self.policy == "bapp-r":
            tiers = bapp_r(n, self.alpha, self.rng)
        elif self.policy == "weighted":
            tiers = mpp(n, self.modulus, start=self._stripe)
            self._stripe += n
        else:                       # proportional
            tiers = lpp(n, 1 / self.modulus)
        return Placement(int(nbytes), self.page_bytes, tiers)

    def place_pool(self, nbytes: int) -> Placement:
        """The KV pool: LPP under BOOST (DSR picks the addresses), else the static policy's."""
        if self.policy in ("boost", "proportional"):
            return Placement(int(nbytes), self.page_bytes, lpp(self._pages(nbytes), 1 / self.modulus))
        return self.place(nbytes)

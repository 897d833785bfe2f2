"""Is NEW faster or slower than BASE? Two-sample tests on measured times, in pure Python.

* :func:`mann_whitney` — the Mann-Whitney U test (two-sided): exact null distribution for small
  samples without ties, the normal approximation with tie and continuity corrections otherwise.
* :func:`median_ratio_interval` — a percentile bootstrap interval of ``median(new) /
  median(base)``. A resample's median is drawn directly from its exact distribution (the k-th
  smallest of n uniforms is Beta(k, n - k + 1)), so a replicate costs O(1) whatever the sample
  size, and the interval is the one plain resampling would converge to.

Both are deterministic (a fixed seed), need nothing beyond the standard library, and are what
``python -m param_compute.analysis.compare`` uses for its significance call.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from param_compute.results.stats import quantile

#: Exact U distribution up to this many (n_base * n_new) pairs; the normal approximation beyond.
EXACT_PAIRS = 2500


def _ranks(values: Sequence[float]) -> Tuple[List[float], List[int]]:
    """Mid-ranks (1-based) of ``values`` and the sizes of their tie groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: List[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        rank = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = rank
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@functools.lru_cache(maxsize=256)
def _u_distribution(m: int, n: int) -> Tuple[int, ...]:
    """Counts of each U = 0..m*n over all C(m+n, m) orderings (Gaussian binomial coefficients)."""
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)), then divide by (1 - q^i): both in place, exact integers
        shift = n + i
        for k in range(size - 1, shift - 1, -1):
            poly[k] -= poly[k - shift]
        for k in range(i, size):
            poly[k] += poly[k - i]
    return tuple(poly)


def mann_whitney(base: Sequence[float], new: Sequence[float]) -> Tuple[float, float]:
    """(U of ``new``, two-sided p-value). U counts pairs where new > base (ties count half);
    p is 1.0 when either sample is empty or every value is equal."""
    m, n = len(base), len(new)
    if m == 0 or n == 0:
        return 0.0, 1.0
    ranks, ties = _ranks(list(new) + list(base))
    u_new = sum(ranks[:n]) - n * (n + 1) / 2
    mean = m * n / 2
    if not ties and m * n <= EXACT_PAIRS:
        counts = _u_distribution(m, n)
        total = math.comb(m + n, m)
        u = int(round(u_new))
        low = sum(counts[: u + 1])
        high = sum(counts[u:])
        return u_new, min(1.0, 2 * min(low, high) / total)
    size = m + n
    tie_term = sum(t ** 3 - t for t in ties) / (size * (size - 1))
    variance = m * n / 12 * ((size + 1) - tie_term)
    if variance <= 0:
        return u_new, 1.0
    z = max(abs(u_new - mean) - 0.5, 0.0) / math.sqrt(variance)
    return u_new, min(1.0, math.erfc(z / math.sqrt(2)))


def _bootstrap_median(ordered: Sequence[float], rng: random.Random) -> float:
    """The median of one with-replacement resample of ``ordered`` (sorted), drawn directly."""
    n = len(ordered)
    if n == 1:
        return ordered[0]
    k = (n + 1) // 2  # the lower middle order statistic (1-based)
    u = rng.betavariate(k, n - k + 1)
    low = ordered[min(int(u * n), n - 1)]
    if n % 2:
        return low
    # the next order statistic: the smallest of the n - k uniforms above u
    v = u + (1 - u) * (1 - rng.random() ** (1 / (n - k)))
    return (low + ordered[min(int(v * n), n - 1)]) / 2


def median_ratio_interval(base: Sequence[float], new: Sequence[float], confidence: float = 0.95,
                          resamples: int = 2000, seed: int = 0
                          ) -> Optional[Tuple[float, float]]:
    """Percentile bootstrap interval of median(new) / median(base); None without data."""
    if not base or not new or resamples <= 0:
        return None
    rng = random.Random(seed)
    base_sorted, new_sorted = sorted(base), sorted(new)
    ratios = []
    for _ in range(resamples):
        b = _bootstrap_median(base_sorted, rng)
        ratios.append(_bootstrap_median(new_sorted, rng) / b if b > 0 else math.inf)
    ratios.sort()
    tail = (1 - confidence) / 2
    return quantile(ratios, tail), quantile(ratios, 1 - tail)


@dataclass(frozen=True, slots=True)
class Comparison:
    """BASE vs NEW for one run and pass. ``speedup`` = median(base) / median(new) (>1: NEW
    faster); ``ratio_interval`` bounds median(new) / median(base)."""

    base_median: float
    new_median: float
    p_value: float
    ratio_interval: Optional[Tuple[float, float]]
    significant: bool

    @property
    def speedup(self) -> float:
        return self.base_median / self.new_median if self.new_median > 0 else math.inf

    @property
    def change_pct(self) -> float:
        """How much longer NEW takes, in percent (negative: shorter)."""
        return (self.new_median / self.base_median - 1) * 100 if self.base_median > 0 else 0.0

    @property
    def verdict(self) -> str:
        if not self.significant:
            return "same"
        return "faster" if self.new_median < self.base_median else "slower"


def compare_samples(base: Sequence[float], new: Sequence[float], alpha: float = 0.05,
                    resamples: int = 2000, seed: int = 0) -> Comparison:
    """Significant when Mann-Whitney p < alpha and the (1 - alpha) bootstrap interval of the
    median ratio excludes 1; with ``resamples=0`` the test alone decides."""
    from param_compute.results.stats import summarize

    base_median = summarize(base)["median"]
    new_median = summarize(new)["median"]
    _, p_value = mann_whitney(base, new)
    interval = median_ratio_interval(base, new, 1 - alpha, resamples, seed)
    excludes_one = interval is None or interval[0] > 1 or interval[1] < 1
    significant = p_value < alpha and excludes_one and base_median != new_median
    return Comparison(base_median, new_median, p_value, interval, significant)

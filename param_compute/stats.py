"""Summary statistics of a sample of times (pure Python, computed once per record)."""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

#: A record whose coefficient of variation exceeds this is flagged ``noisy``.
NOISY_CV = 0.10


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear`` method)."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1 - weight) + sorted_values[high] * weight


def summarize(values: Sequence[float]) -> Optional[Dict[str, float]]:
    """n, mean, median, min, max, stdev, p10, p90, iqr, cv of ``values``; None when empty."""
    n = len(values)
    if n == 0:
        return None
    ordered = sorted(values)
    mean = math.fsum(ordered) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in ordered) / (n - 1)) if n > 1 else 0.0
    return {
        "n": n,
        "mean": mean,
        "median": quantile(ordered, 0.5),
        "min": ordered[0],
        "max": ordered[-1],
        "stdev": stdev,
        "p10": quantile(ordered, 0.1),
        "p90": quantile(ordered, 0.9),
        "iqr": quantile(ordered, 0.75) - quantile(ordered, 0.25),
        "cv": stdev / mean if mean > 0 else 0.0,
    }

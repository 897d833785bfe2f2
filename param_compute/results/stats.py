"""Summary statistics of a sample of times (pure Python, computed once per record).

A sample is ``noisy`` when the 95% confidence interval of its median, from order statistics
(distribution-free), is wider than ``NOISY_CI_WIDTH`` of the median: a few outliers leave a
tight median tight, however they move the mean or the coefficient of variation. Below
``MIN_TRUSTED_N`` values no interval is worth much, and the summary says so.

A sample is *descheduled* when its wall time exceeds the calling thread's CPU time by more than
``DESCHEDULED_SLACK``: the thread waited for a core. A pass with more than
``DISTURBED_FRACTION`` of its samples descheduled (``descheduled`` in its stats) is
``disturbed``. Raw timings are thinned to at most ``--keep-samples`` evenly spread values
(:func:`thin`) after the statistics are computed from all of them.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

#: A pass whose median's 95% interval is wider than this fraction of the median is ``noisy``.
NOISY_CI_WIDTH = 0.10
#: Fewer measured values than this are too few to trust (the interval is the whole range).
MIN_TRUSTED_N = 5
#: A sample whose wall time exceeds its thread CPU time by more than this fraction was descheduled.
DESCHEDULED_SLACK = 0.10
#: A pass with more than this fraction of its samples descheduled is ``disturbed``.
DISTURBED_FRACTION = 0.25
CONFIDENCE = 0.95
_Z95 = 1.959963984540054
_EXACT_UP_TO = 400


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> Tuple[int, int]:
    """0-based ranks (low, high) of the order statistics bounding the median's interval.

    The interval [x(j), x(n-1-j)] (0-based) covers the median with probability 1 - 2 P(B <= j),
    B ~ Binomial(n, 1/2); ``j`` is the largest rank keeping that at least ``confidence``
    (exact sums up to a few hundred values, the normal approximation above). Where even the
    whole range covers less (n < 6 at 95%), the interval is the whole range.
    """
    if n <= 0:
        raise ValueError("an empty sample has no median interval")
    alpha = (1.0 - confidence) / 2
    j = 0
    if n <= _EXACT_UP_TO:
        total = 2 ** n
        cdf = 1  # 2**n * P(B <= j)
        while j + 1 < (n + 1) // 2:
            cdf += math.comb(n, j + 1)
            if cdf / total > alpha:  # [x(j+1), x(n-2-j)] would cover less than asked
                break
            j += 1
    else:
        j = max(0, int(math.floor((n - _Z95 * math.sqrt(n)) / 2)) - 1)
    return j, n - 1 - j


def median_ci(sorted_values: Sequence[float],
              confidence: float = CONFIDENCE) -> Tuple[float, float]:
    """The distribution-free confidence interval of the median of ``sorted_values``."""
    low, high = median_ci_ranks(len(sorted_values), confidence)
    return sorted_values[low], sorted_values[high]


def is_noisy(stats: Optional[Dict[str, Any]]) -> bool:
    """Whether a pass's stats say its median is not pinned down (n > 2 and a wide interval)."""
    if not stats or stats.get("n", 0) <= 2:
        return False
    width = stats.get("ci_rel_width")
    if width is None:  # stats written before the interval existed: judge by the spread
        return stats.get("cv", 0.0) > NOISY_CI_WIDTH
    return width > NOISY_CI_WIDTH


def is_disturbed(stats: Optional[Dict[str, Any]]) -> bool:
    """Whether a pass's stats say too many of its samples waited for a core."""
    fraction = (stats or {}).get("descheduled")
    return isinstance(fraction, (int, float)) and fraction > DISTURBED_FRACTION


def descheduled(wall_ms: Sequence[float], cpu_ms: Sequence[float]) -> List[bool]:
    """Per sample, whether its wall time exceeds its CPU time by more than the slack."""
    limit = 1.0 + DESCHEDULED_SLACK
    return [wall > cpu * limit for wall, cpu in zip(wall_ms, cpu_ms)]


def thin(values: Sequence[Any], keep: int) -> List[Any]:
    """At most ``keep`` of ``values``, evenly spread over them (first and last kept)."""
    n = len(values)
    if keep <= 0:
        return []
    if n <= keep:
        return list(values)
    if keep == 1:
        return [values[0]]
    return [values[(i * (n - 1)) // (keep - 1)] for i in range(keep)]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear`` method)."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1 - weight) + sorted_values[high] * weight


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the mean of the middle two of an even count); ValueError
    when there are none. The one median of the code base: everything else calls this."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("the median of no values")
    return quantile(ordered, 0.5)


def _nonempty(values: Iterable[float]) -> List[float]:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("the median of no values")
    return ordered


def lower_median(values: Iterable[float]) -> float:
    """The lower of the two middle values (the median itself for an odd count): a robust
    level that is one of the values."""
    ordered = _nonempty(values)
    return ordered[(len(ordered) - 1) // 2]


def upper_median(values: Iterable[float]) -> float:
    """The upper of the two middle values (the median itself for an odd count)."""
    ordered = _nonempty(values)
    return ordered[len(ordered) // 2]


def summarize(values: Sequence[float]) -> Optional[Dict[str, float]]:
    """n, mean, median, min, max, stdev, p10, p90, iqr, cv and the median's 95% interval
    (``ci_low``, ``ci_high``, ``ci_rel_width`` = its width over the median); None when empty."""
    n = len(values)
    if n == 0:
        return None
    ordered = sorted(values)
    mean = math.fsum(ordered) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in ordered) / (n - 1)) if n > 1 else 0.0
    median = quantile(ordered, 0.5)
    ci_low, ci_high = median_ci(ordered)
    return {
        "n": n,
        "mean": mean,
        "median": median,
        "min": ordered[0],
        "max": ordered[-1],
        "stdev": stdev,
        "p10": quantile(ordered, 0.1),
        "p90": quantile(ordered, 0.9),
        "iqr": quantile(ordered, 0.75) - quantile(ordered, 0.25),
        "cv": stdev / mean if mean > 0 else 0.0,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "ci_rel_width": (ci_high - ci_low) / median if median > 0 else 0.0,
    }


def across_repetitions(stats: Dict[str, Any], medians: Sequence[float]) -> Dict[str, Any]:
    """``stats`` of every repetition's samples pooled, with the median and its interval taken
    across repetitions instead: ``median`` is the median of ``medians`` (one per repetition,
    listed as ``repetition_medians``) and ``ci_low``/``ci_high`` its distribution-free
    interval over them (the whole range below 6 repetitions). One repetition (the others
    interrupted) leaves the sample's own median and interval."""
    if len(medians) < 2:
        return dict(stats, repetition_medians=list(medians))
    ordered = sorted(medians)
    median = quantile(ordered, 0.5)
    ci_low, ci_high = median_ci(ordered)
    return dict(stats, median=median, ci_low=ci_low, ci_high=ci_high,
                ci_rel_width=(ci_high - ci_low) / median if median > 0 else 0.0,
                repetition_medians=list(medians))


#: Facts of several processes' measurements of one pass that add up, and those where the worst
#: counts; any other fact is the first process's.
_SUMMED_FACTS = ("involuntary_switches", "discarded")
_WORST_FACTS = ("descheduled", "peak_bytes")
#: What ``summarize`` and ``across_repetitions`` compute (the rest of a pass's stats are facts).
SUMMARY_KEYS = frozenset({"n", "mean", "median", "min", "max", "stdev", "p10", "p90", "iqr", "cv",
                          "ci_low", "ci_high", "ci_rel_width", "repetition_medians", "kept"})


def pooled_facts(each: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The facts of several processes' measurements of one pass as one (``--repetitions``,
    ``ab``): counts summed, the descheduled fraction and peak bytes at their worst."""
    out: Dict[str, Any] = {}
    for facts in each:
        for key, value in facts.items():
            if key in SUMMARY_KEYS:
                continue
            if key not in out:
                out[key] = value
            elif key in _SUMMED_FACTS and isinstance(value, (int, float)):
                out[key] += value
            elif key in _WORST_FACTS and isinstance(value, (int, float)):
                out[key] = max(out[key], value)
    return out

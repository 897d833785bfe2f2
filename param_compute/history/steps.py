"""Step detection: where a series' level changed, by how much, and whether it is real.

Binary segmentation on the medians: within a stretch of labels the split that best separates
two levels (least squares on the log of a running median of three, so one outlier neither
pulls the split nor is a level of its own) is a step when

* each side has at least ``min_points`` labels that are no isolated outliers (a single odd
  label is never a step; see below);
* the intervals say it is real: for a slowdown the lower median of the later side's interval
  lows lies above the upper median of the earlier side's interval highs (the mirror for a
  speed-up), so most runs after the step are beyond most runs before it, noise included;
* it is beyond the scatter between runs, which each run's interval does not see: the log of
  its size exceeds ``SCATTER_Z`` standard errors of that scatter;
* its size, the median of the later side over the median of the earlier side, is at least
  ``min_change`` (relative).

Outliers can neither make a step nor hide one. A label far from both of its neighbours and
from the median of the five labels around it is an isolated outlier (:func:`_isolated`, with a
first estimate of the scatter that outliers cannot inflate, :func:`_rough_noise`): it takes no
part in the levels, their intervals or the scatter (the median absolute difference between
the other labels, and around the two levels). So two isolated 3x labels among eight leave a
+50% step that three labels confirm a step; alone, they are none. Two labels in a row at a new
level are a level, not outliers.

Candidates come from binary segmentation with a penalty (each split searched again on both
sides); each is moved within a few places to where it best separates the labels
(:func:`_refine`, as the smoothing can shift a split beside an outlier), judged against its
neighbouring levels, and the weakest failing one is dropped, its levels merged, until every
one left is a step. Times: a step up (``change > 0``) is a regression. Pure Python,
O(n log n) per series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from param_compute.history.series import Point
from param_compute.results.stats import lower_median, median, upper_median

#: Smallest relative step reported by default (2%).
MIN_CHANGE = 0.02
#: Labels each side of a step needs at least.
MIN_POINTS = 2
#: How many standard errors of the run-to-run scatter a step must exceed.
SCATTER_Z = 3.0
#: The median, for normal scatter of standard deviation 1, of a label's distance to the
#: nearest of four independent neighbours (what :func:`_rough_noise` measures; simulated).
_NEAREST_OF_FOUR = 0.2966
#: Neighbours each side :func:`_rough_noise` and :func:`_isolated` look at.
_REACH = 2
#: How many places either way :func:`_refine` moves a candidate split.
_REFINE = 3


@dataclass(frozen=True)
class Step:
    index: int  # the first point of the new level
    label: str
    before: float  # the level (median of medians) before
    after: float
    change: float  # after / before - 1

    @property
    def regression(self) -> bool:
        return self.change > 0


def _smoothed_logs(points: Sequence[Point]) -> List[float]:
    """log of the running median of three (the ends keep their own value against one
    neighbour: the median of the end, its neighbour and the neighbour's neighbour's level)."""
    values = [max(p.median, 1e-300) for p in points]
    n = len(values)
    if n < 3:
        return [math.log(v) for v in values]
    out = [values[0]] + [a + b + c - max(a, b, c) - min(a, b, c)
                         for a, b, c in zip(values, values[1:], values[2:])] + [values[-1]]
    out[0] = median([values[0], out[1], 3 * out[1] - 2 * out[2]])
    out[-1] = median([values[-1], out[-2], 3 * out[-2] - 2 * out[-3]])
    return [math.log(max(v, 1e-300)) for v in out]


def _best_split(logs: Sequence[float], start: int, end: int,
                min_points: int) -> Tuple[int, float]:
    """The split k (start+min_points .. end-min_points) that minimizes the squared error of
    two levels, and how much it lowers that error; (-1, 0) when the stretch is too short."""
    if end - start < 2 * min_points:
        return -1, 0.0
    total = math.fsum(logs[start:end])
    count = end - start
    best, best_k, running = -math.inf, -1, 0.0
    for k in range(start, end - min_points):
        running += logs[k]
        left = k + 1 - start
        if left < min_points:
            continue
        right_sum = total - running
        score = running * running / left + right_sum * right_sum / (count - left)
        if score > best + 1e-15:
            best, best_k = score, k + 1
    return best_k, best - total * total / count


def _noise(logs: Sequence[float]) -> float:
    """The scatter between neighbouring labels (log units, a standard deviation; robust: from
    the median absolute difference, so a few steps do not count)."""
    differences = [abs(b - a) for a, b in zip(logs, logs[1:])]
    return 1.4826 * upper_median(differences) / math.sqrt(2) if differences else 0.0


def _rough_noise(logs: Sequence[float]) -> float:
    """The scatter between labels (as :func:`_noise`) where outliers may still be among them:
    per label, its distance to the nearest of its four nearest neighbours in label order (an
    outlier is far from all of them, yet its distance is one value of many; on either side of
    a step every label has neighbours of its own level), the median of those, scaled to a
    standard deviation of normal scatter. Short series (under five labels): :func:`_noise`."""
    n = len(logs)
    if n < 2 * _REACH + 1:
        return _noise(logs)
    one = [abs(b - a) for a, b in zip(logs, logs[1:])]  # one[i]: labels i and i + 1
    two = [abs(b - a) for a, b in zip(logs, logs[2:])]  # two[i]: labels i and i + 2
    # inside: the two neighbours each side; the two first and last labels: four neighbours on
    # the side they have
    nearest = [min(a, b, c, d) for a, b, c, d in zip(one[1:], one[2:], two, two[2:])]
    ends = []
    for i in (0, 1, n - 2, n - 1):
        start = min(max(i - _REACH, 0), n - 2 * _REACH - 1)
        ends.append(min(abs(logs[i] - logs[j]) for j in range(start, start + 2 * _REACH + 1)
                        if j != i))
    return upper_median(ends[:2] + nearest + ends[2:]) / _NEAREST_OF_FOUR


def _penalty(noise: float, n: int, min_change: float) -> float:
    """How much a split must lower the squared error to be a candidate: noise² times 3 ln n,
    and at least what a ``min_change`` step between two pairs of labels gives."""
    return max(3 * noise * noise * math.log(max(n, 2)), math.log1p(min_change) ** 2 / 2)


def _judge(points: Sequence[Point], start: int, split: int, end: int, min_change: float,
           noise: float, odd: Sequence[bool], min_points: int) -> Step | None:
    """The step between ``points[start:split]`` and ``points[split:end]``, or None (see the
    module's doc); labels marked ``odd`` (isolated outliers) are left out of both sides."""
    before = [p for p, o in zip(points[start:split], odd[start:split]) if not o]
    after = [p for p, o in zip(points[split:end], odd[split:end]) if not o]
    if len(before) < min_points or len(after) < min_points:
        return None
    level_before = median([p.median for p in before])
    level_after = median([p.median for p in after])
    if level_before <= 0 or level_after <= 0:
        return None
    change = level_after / level_before - 1
    if abs(change) < min_change:
        return None
    # beyond the scatter between runs (which the runs' own intervals do not see)
    logs_before = [math.log(max(p.median, 1e-300)) for p in before]
    logs_after = [math.log(max(p.median, 1e-300)) for p in after]
    residuals = ([abs(x - math.log(level_before)) for x in logs_before]
                 + [abs(x - math.log(level_after)) for x in logs_after])
    scatter = max(noise, 1.4826 * upper_median(residuals))
    if abs(math.log(level_after / level_before)) <= SCATTER_Z * scatter * math.sqrt(
            1 / len(before) + 1 / len(after)):
        return None
    if change > 0:
        real = lower_median([p.lower for p in after]) > upper_median([p.upper for p in before])
    else:
        real = upper_median([p.upper for p in after]) < lower_median([p.lower for p in before])
    if not real:
        return None
    first = next(i for i in range(split, end) if not odd[i])  # the new level's first label
    return Step(first, points[first].label, level_before, level_after, change)


def _isolated(logs: Sequence[float], noise: float, min_change: float) -> List[bool]:
    """Which labels are isolated outliers: farther than the scatter allows (``SCATTER_Z``
    standard deviations of a difference, and at least ``min_change``) from each of their
    neighbours and from the local level, the median of the five labels around them (which two
    outliers cannot move). A level, even of two labels, is never one: each of its labels has a
    neighbour of its own level."""
    n = len(logs)
    if n < 2 * _REACH + 1:
        return [False] * n
    far = max(SCATTER_Z * math.sqrt(2) * noise, math.log1p(min_change))
    apart = [abs(b - a) > far for a, b in zip(logs, logs[1:])]  # labels i and i + 1
    odd = [False] * n
    for i in range(n):
        if (i == 0 or apart[i - 1]) and (i == n - 1 or apart[i]):  # far from its neighbours
            start = min(max(i - _REACH, 0), n - 2 * _REACH - 1)
            odd[i] = abs(logs[i] - median(logs[start:start + 2 * _REACH + 1])) > far
    return odd


def _candidates(logs: Sequence[float], noise: float, min_change: float,
                min_points: int) -> List[int]:
    """Change points by binary segmentation with a penalty (no judging yet)."""
    penalty = _penalty(noise, len(logs), min_change)
    found: List[int] = []
    stretches = [(0, len(logs))]
    while stretches:
        start, end = stretches.pop()
        split, gain = _best_split(logs, start, end, min_points)
        if split < 0 or gain <= penalty:
            continue
        found.append(split)
        stretches += [(start, split), (split, end)]
    return sorted(found)


def _refine(logs: Sequence[float], splits: List[int], noise: float, min_change: float,
            min_points: int, odd: Sequence[bool]) -> List[int]:
    """Each split moved (within :data:`_REFINE` places, each level keeping ``min_points``
    labels) to where the labels in between are nearest to the levels on their sides (the
    medians of the labels beyond that zone), each counting at most ``cap`` (an outlier is one
    label off, however far off); ties keep the place nearest the candidate. The smoothing the
    candidates come from can put a split beside an outlier (``1 3 1 3 1 | 1.5 1.5``) where
    its levels are not those of the labels."""
    cap = max(3 * noise, math.log1p(max(min_change, 1e-6)))
    out: List[int] = []
    for index, split in enumerate(splits):
        start = out[-1] if out else 0
        end = splits[index + 1] if index + 1 < len(splits) else len(logs)
        low = max(split - _REFINE, start + min_points)
        high = min(split + _REFINE, end - min_points)
        if low >= high:
            out.append(split)
            continue
        before = median([x for x, o in zip(logs[start:split], odd[start:split]) if not o]
                        or logs[start:split])
        after = median([x for x, o in zip(logs[split:end], odd[split:end]) if not o]
                       or logs[split:end])
        costs = {}
        for place in range(low, high + 1):
            costs[place] = round(math.fsum(
                min(abs(logs[i] - (before if i < place else after)), cap)
                for i in range(low, high)), 12)
        out.append(min(costs, key=lambda place: (costs[place], abs(place - split))))
    return out


def detect(points: Sequence[Point], min_change: float = MIN_CHANGE,
           min_points: int = MIN_POINTS) -> List[Step]:
    """The steps of a series, in label order (see the module docstring): candidates from
    binary segmentation, each judged against its neighbouring levels without the isolated
    outliers; the weakest failing candidate is dropped (its levels merge) until every one left
    is a step."""
    if len(points) < 2 * min_points:
        return []
    logs = [math.log(max(p.median, 1e-300)) for p in points]
    odd = _isolated(logs, _rough_noise(logs), min_change)
    noise = _noise([x for x, outlier in zip(logs, odd) if not outlier])
    splits = _refine(logs, _candidates(_smoothed_logs(points), noise, min_change, min_points),
                     noise, min_change, min_points, odd)
    while True:
        bounds = [0, *splits, len(points)]
        steps = [_judge(points, bounds[i], bounds[i + 1], bounds[i + 2], min_change, noise,
                        odd, min_points) for i in range(len(splits))]
        failing = [i for i, step in enumerate(steps) if step is None]
        if not failing:
            return [step for step in steps if step is not None]
        weakest = min(failing, key=lambda i: abs(_plain_change(points, bounds[i],
                                                               bounds[i + 1], bounds[i + 2])))
        del splits[weakest]


def _plain_change(points: Sequence[Point], start: int, split: int, end: int) -> float:
    before = median([p.median for p in points[start:split]])
    return median([p.median for p in points[split:end]]) / before - 1 if before > 0 else 0.0

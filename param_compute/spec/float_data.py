"""Floating-point tensors whose values are not ordinary: what a spec may say about them, checked.

One optional key of a ``tensor`` data spec (floating dtypes only: ``float16``, ``bfloat16``,
``float32``, ``float64`` and their other names) says which share of its values is special,
because some kernels' speed depends on it (a CPU ``sqrt`` over subnormals, or over randomly
placed zeros, runs several times slower than over ordinary values):

``value_profile``: ``{"zeros": Z, "subnormal": S, "negative": N}``, the fractions of exact
  zeros, of subnormal values (nonzero, smaller in magnitude than the dtype's smallest normal
  number) and of negative ordinary values (a capture's rounded to ``NEGATIVE_STEP``), each in
  [0, 1], ``Z + S + N <= 1``, each key optional (0 when absent). The data generator
  (``data.generator``) makes each element independently a zero with probability Z, a
  positive subnormal with probability S, and otherwise what it would have been without the
  key, negated with probability N / (1 - Z - S). The sign matters where values meet each
  other: a convolution's weights drawn all positive (the default draw is in [0, 1)) smooth
  its output, and a max-pool over a smooth input runs several times faster than over a
  trained net's (its comparisons predicted).

A live capture (``capture.live.value_profile``) writes the key only where it is significant
(``SIGNIFICANT``), the fractions rounded by ``profile_of`` so that calls whose arguments differ
by sampling noise still fold into one config; ``zero_rows`` only where most zeros lie in zero
rows (``ROWS_SHARE``) and it says something (rows wider than one element, not all zeros).
Validation checks it with ``profile_problems``. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from param_compute.dtypes import DTYPE_NAMES
from param_compute.spec.wording import short

VALUE_PROFILE = "value_profile"
PROFILE_KEYS = ("zeros", "subnormal", "negative")
ZERO_ROWS = "zero_rows"
KNOWN_KEYS = PROFILE_KEYS + (ZERO_ROWS,)
#: Torch dtype names (``DTYPE_NAMES`` values) of the tensors a profile applies to.
FLOAT_DTYPES = frozenset(("float16", "bfloat16", "float32", "float64"))
#: A captured profile is written when one of its fractions reaches this.
SIGNIFICANT = {"zeros": 0.01, "subnormal": 0.001, "negative": 0.025}
#: A captured ``negative`` is rounded to a multiple of this: signs decide speed only broadly
#: (a max-pool's comparisons predicted or not), and activations' shares vary from call to
#: call, so finer steps would split one op's calls into many configs.
NEGATIVE_STEP = 0.05
#: A captured ``zero_rows`` is written when its rows hold at least this share of the zeros.
ROWS_SHARE = 0.5
#: Significant digits a captured fraction keeps (of its complement, above one half).
DIGITS = 2


def round_fraction(value: float) -> float:
    """``value`` (a fraction) to ``DIGITS`` significant digits, kept within [0, 1]; above one
    half its complement is rounded instead, so that a fraction short of 1 never reads as 1
    (one nonzero per 10,000-wide row is 0.9999 zeros, not a tensor of zeros)."""
    if not value > 0:
        return 0.0
    if value >= 1:
        return 1.0
    if value > 0.5:
        return round(1.0 - _significant(1.0 - value), 12)
    return _significant(value)


def _significant(value: float) -> float:
    return round(value, DIGITS - 1 - math.floor(math.log10(value)))


def profile_of(zeros: float, subnormal: float, zero_rows: Optional[float] = None,
               negative: float = 0.0) -> Optional[Dict[str, float]]:
    """The ``value_profile`` a capture writes for a tensor with these fractions of zeros,
    subnormals and negative values (and of all-zero rows, None where rows don't apply), or
    None when no fraction is significant. A fraction below its threshold is written as 0 (and
    ``negative`` left out), the others rounded (``round_fraction``), ``negative`` to at most
    what zeros and subnormals leave; ``zero_rows`` only where its rows hold at least
    ``ROWS_SHARE`` of significant zeros and not all of the values are zeros once rounded."""
    fractions = {"zeros": zeros, "subnormal": subnormal, "negative": negative}
    if all(fractions[key] < SIGNIFICANT[key] for key in PROFILE_KEYS):
        return None
    profile = {key: round_fraction(fractions[key]) if fractions[key] >= SIGNIFICANT[key] else 0.0
               for key in PROFILE_KEYS[:2]}
    left = round(1 - profile["zeros"] - profile["subnormal"], 12)
    share = min(round(round(negative / NEGATIVE_STEP) * NEGATIVE_STEP, 12), left)
    if negative >= SIGNIFICANT["negative"] and share > 0:
        profile["negative"] = share
    if zero_rows is not None and zeros >= SIGNIFICANT["zeros"] \
            and zero_rows >= ROWS_SHARE * zeros and profile["zeros"] < 1:
        profile[ZERO_ROWS] = min(round_fraction(zero_rows), profile["zeros"])
    return profile


def _fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and 0 <= value <= 1


def _dims(spec: Dict[str, Any]) -> List[Tuple[int, Any]]:
    """(dims, shape) of each shape a tensor spec may take, where the spec itself says (not
    where its whole shape is copied from another arg)."""
    shape = spec.get("shape")
    copies = [entry.get("shape") for entry in spec.get("__copy__", []) or []
              if isinstance(entry, dict)]
    if not isinstance(shape, list) or any(isinstance(c, int) and not isinstance(c, bool)
                                          for c in copies):
        return []
    listed, ranged = ("shape" in (spec.get(key) or []) for key in ("__list__", "__range__"))
    if listed and ranged:  # reported as in both: which form the dims have is unknown
        return []
    return [(len(s), s) for s in (shape if listed else [shape]) if isinstance(s, list)]


def _rows_problems(spec: Dict[str, Any], profile: Dict[str, Any]) -> List[Tuple[tuple, str,
                                                                                  Optional[str]]]:
    where = (VALUE_PROFILE, ZERO_ROWS)
    rows = profile[ZERO_ROWS]
    if not _fraction(rows):
        return [(where, f"zero_rows is a fraction in [0, 1], got {short(rows, 40)}", None)]
    zeros = profile.get("zeros", 0)
    if _fraction(zeros) and rows > zeros:
        return [(where, f"zero_rows is {rows:g}, more than zeros ({zeros:g}): the zeros of "
                        "all-zero rows are among the zeros",
                 f"zero_rows is at most zeros (raise zeros to at least {rows:g})")]
    for dims, shape in _dims(spec):
        if dims < 2:
            return [(where, f"zero_rows applies to tensors of at least 2 dims (rows along dim "
                            f"0), not shape {short(shape, 40)}", "drop zero_rows")]
    return []


def profile_problems(spec: Dict[str, Any]) -> List[Tuple[tuple, str, Optional[str]]]:
    """(path under the tensor spec, message, hint) for each problem of its ``value_profile``."""
    if VALUE_PROFILE not in spec:
        return []
    profile = spec[VALUE_PROFILE]
    where = (VALUE_PROFILE,)
    dtypes = spec.get("dtype") if isinstance(spec.get("dtype"), list) else [spec.get("dtype")]
    for dtype in dtypes:  # each of a ranged or listed dtype gets the profile
        if isinstance(dtype, str) and dtype in DTYPE_NAMES \
                and DTYPE_NAMES[dtype] not in FLOAT_DTYPES:
            return [(where, f"value_profile applies to floating tensors, not {dtype}",
                     "use a floating dtype (float, half, bfloat16, double) or drop it")]
    if not isinstance(profile, dict):
        return [(where, 'value_profile is an object {"zeros": FRACTION, "subnormal": FRACTION, '
                        '"negative": FRACTION, "zero_rows": FRACTION}', None)]
    problems: List[Tuple[tuple, str, Optional[str]]] = [
        (where + (key,), f"unknown key {str(key)[:40]!r}",
         f"known keys: {', '.join(KNOWN_KEYS)}") for key in profile if key not in KNOWN_KEYS]
    for key in PROFILE_KEYS:
        if key in profile and not _fraction(profile[key]):
            problems.append((where + (key,), f"{key} is a fraction in [0, 1], got "
                                             f"{short(profile[key], 40)}", None))
    if not problems and sum(profile.get(key, 0) for key in PROFILE_KEYS) > 1:
        named = " + ".join(key for key in PROFILE_KEYS if key in profile)
        problems.append((where, f"{named} is "
                                f"{sum(profile.get(key, 0) for key in PROFILE_KEYS):g}, more "
                                "than 1 (all the values)", None))
    if ZERO_ROWS in profile:
        problems += _rows_problems(spec, profile)
    return problems

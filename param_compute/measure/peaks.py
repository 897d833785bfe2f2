"""Machine peaks for utilization: the per-machine cache ``calibrate`` writes, and peaks files.

A peaks entry is ``{"flops_per_s": {dtype: FLOP/s}, "bytes_per_s": B/s}`` (dtype names as
torch's: ``float32``, ``bfloat16``...; spec aliases such as ``float`` and ``half`` accepted in
files). The cache is one JSON file under the user's cache directory (``$PARAM_COMPUTE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/param_compute``, else ``~/.cache/param_compute``) holding one entry per
machine key: device name, driver and torch versions, thread count. Torch-free.

Peaks files and the cache are untrusted input: only regular files are read (a FIFO or a device
is refused, never waited on), at most ``MAX_PEAKS_BYTES``, and every rate must lie within what a
machine can do (``RATE_RANGE``): a peak of 5e-324 FLOP/s or 1e300 B/s is refused, naming the file
and key, instead of turning into infinite utilization.
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any, Dict, Optional

from param_compute.dtypes import DTYPE_NAMES
from param_compute.errors import OptionsError
from param_compute.files import read_bounded, write_new

FLOATING = ("float64", "float32", "float16", "bfloat16")
#: Largest peaks file or cache read (an entry is a few hundred bytes; the cache one per setup).
MAX_PEAKS_BYTES = 1 << 20
#: The physical range of each rate: at least 1 kFLOP/s (1 kB/s); at most 1e18 FLOP/s (an
#: exaFLOP/s, ~100x today's largest device) and 1e16 B/s (~1000x today's HBM).
RATE_RANGE = {"flops_per_s": (1e3, 1e18), "bytes_per_s": (1e3, 1e16)}


def cache_path() -> Path:
    base = os.environ.get("PARAM_COMPUTE_CACHE_DIR")
    if base:
        return Path(base) / "peaks.json"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "param_compute" / "peaks.json"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def machine_key(device_name: str, driver: str, torch_version: str, threads: int) -> str:
    """The cache key of one machine setup: ``device | driver | torch | threads``."""
    return f"{device_name} | {driver} | torch {torch_version} | {threads} threads"


def canonical_dtype(name: str) -> Optional[str]:
    """``float`` -> ``float32``, ``torch.bfloat16`` -> ``bfloat16``; None if not floating."""
    name = name.removeprefix("torch.")
    name = DTYPE_NAMES.get(name, name)
    return name if name in FLOATING else None


class Peaks:
    """Peak FLOP/s per dtype and peak bandwidth of one machine, and where they came from."""

    def __init__(self, flops_per_s: Dict[str, float], bytes_per_s: Optional[float],
                 source: str):
        self.flops_per_s = flops_per_s
        self.bytes_per_s = bytes_per_s
        self.source = source

    def for_dtype(self, dtype: Optional[str]) -> Optional[Dict[str, Optional[float]]]:
        """``{flops_per_s, bytes_per_s}`` for a pass whose main dtype is ``dtype``."""
        flops = self.flops_per_s.get(canonical_dtype(dtype) or "") if dtype else None
        if flops is None and self.bytes_per_s is None:
            return None
        return {"flops_per_s": flops, "bytes_per_s": self.bytes_per_s}

    @classmethod
    def from_entry(cls, entry: Dict[str, Any], source: str) -> "Peaks":
        problems = entry_problems(entry)
        if problems:
            raise OptionsError(f"{source}: {problems[0]}")
        flops = {canonical_dtype(k): float(v) for k, v in entry.get("flops_per_s", {}).items()}
        bandwidth = entry.get("bytes_per_s")
        return cls(flops, float(bandwidth) if bandwidth is not None else None, source)

    @classmethod
    def from_file(cls, path: str) -> "Peaks":
        """A peaks file given by hand (``--peaks``); a bad one is an ``OptionsError``."""
        return cls.from_entry(read_json(Path(path), f"--peaks {path}"), f"--peaks {path}")


def read_json(path: Path, where: str) -> Any:
    """The JSON value of a peaks file or the cache: a regular file of at most
    ``MAX_PEAKS_BYTES``, opened without blocking (a FIFO is refused, not waited on); anything
    else is an ``OptionsError`` naming ``where``."""
    data = read_bounded(path, MAX_PEAKS_BYTES, error=lambda refused: OptionsError(
        f"{where}: {refused.reason}"
        + ("; peaks are read from a regular file" if refused.kind else "")))
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise OptionsError(f"{where}: not JSON: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise OptionsError(f"{where}: not JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise OptionsError(f"{where}: not JSON: nested too deep") from None


def _rate_problem(path: str, value: Any, kind: str) -> Optional[str]:
    """Why ``value`` is no physical rate of ``kind`` (``flops_per_s``/``bytes_per_s``), or None."""
    low, high = RATE_RANGE[kind]
    unit = "FLOP/s" if kind == "flops_per_s" else "bytes/s"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 \
            or isinstance(value, float) and not math.isfinite(value):
        return f"{path}: must be a positive number of {unit}, got {value!r}"
    if not low <= value <= high:
        return f"{path}: {value!r} {unit} is not a machine's peak (expected {low:g} to {high:g})"
    return None


def entry_problems(entry: Any) -> list:
    """What is wrong with a peaks entry, each naming its JSON path ($.flops_per_s.float32)."""
    if not isinstance(entry, dict):
        return [f"$: must be an object with flops_per_s and/or bytes_per_s, got "
                f"{type(entry).__name__}"]
    problems = []
    unknown = sorted(set(entry) - {"flops_per_s", "bytes_per_s", "key", "device_name",
                                   "driver", "torch", "threads", "measured", "detail",
                                   "busy_fraction"})
    problems += [f"$.{key}: unknown key (expected flops_per_s, bytes_per_s)" for key in unknown]
    flops = entry.get("flops_per_s", {})
    if not isinstance(flops, dict):
        problems.append("$.flops_per_s: must be an object {dtype: FLOP/s}")
    else:
        for dtype, value in flops.items():
            if canonical_dtype(str(dtype)) is None:
                problems.append(f"$.flops_per_s.{dtype}: not a floating dtype "
                                f"(one of {', '.join(FLOATING)})")
            else:
                problems.append(_rate_problem(f"$.flops_per_s.{dtype}", value, "flops_per_s"))
    if "bytes_per_s" in entry:
        problems.append(_rate_problem("$.bytes_per_s", entry["bytes_per_s"], "bytes_per_s"))
    problems = [problem for problem in problems if problem]
    if not problems and not flops and "bytes_per_s" not in entry:
        problems.append("$: gives neither flops_per_s nor bytes_per_s")
    return problems


def read_cache(path: Optional[Path] = None) -> Dict[str, Any]:
    """The cache's entries by machine key ({} when there is no cache yet); a cache that is no
    regular file, too large, not JSON or not an object is an ``OptionsError`` naming it."""
    path = path or cache_path()
    if not os.path.lexists(path):
        return {}
    data = read_json(path, f"peaks cache {path}")
    if not isinstance(data, dict):
        raise OptionsError(f"peaks cache {path}: $: must be an object {{machine key: peaks}}, "
                           f"got {type(data).__name__}")
    return data


def store(key: str, entry: Dict[str, Any], path: Optional[Path] = None) -> Path:
    """Merge ``entry`` into the cache under ``key`` (dtypes measured before are kept)."""
    path = path or cache_path()
    data = read_cache(path)
    old = data.get(key) if isinstance(data.get(key), dict) else {}
    merged = {**old, **entry}
    old_flops = old.get("flops_per_s") if isinstance(old.get("flops_per_s"), dict) else {}
    kept = {dtype: value for dtype, value in old_flops.items()  # a damaged peak is not kept
            if _rate_problem("", value, "flops_per_s") is None}
    merged["flops_per_s"] = {**kept, **entry.get("flops_per_s", {})}
    data[key] = merged
    write_new(path, json.dumps(data, indent=2, sort_keys=True) + "\n")  # atomic, never via a link
    return path


def cached_peaks(key: str) -> Optional[Peaks]:
    """The cache's peaks for ``key``, None when it has none; an unusable cache or entry is an
    ``OptionsError`` naming the file and key (never silently ignored)."""
    path = cache_path()
    entry = read_cache(path).get(key)
    if entry is None:
        return None
    return Peaks.from_entry(entry, f"peaks cache {path} [{key}]")

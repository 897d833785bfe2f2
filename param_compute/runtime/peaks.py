"""Machine peaks for utilization: the per-machine cache ``calibrate`` writes, and peaks files.

A peaks entry is ``{"flops_per_s": {dtype: FLOP/s}, "bytes_per_s": B/s}`` (dtype names as
torch's: ``float32``, ``bfloat16``...; spec aliases such as ``float`` and ``half`` accepted in
files). The cache is one JSON file under the user's cache directory (``$PARAM_COMPUTE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/param_compute``, else ``~/.cache/param_compute``) holding one entry per
machine key: device name, driver and torch versions, thread count. Torch-free.
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

FLOATING = ("float64", "float32", "float16", "bfloat16")


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
        try:
            entry = json.loads(Path(path).read_text())
        except OSError as exc:
            raise OptionsError(f"--peaks {path}: cannot read it: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise OptionsError(f"--peaks {path}: not JSON: {exc.msg} (line {exc.lineno})") \
                from None
        return cls.from_entry(entry, f"--peaks {path}")


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


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
            elif not _positive(value):
                problems.append(f"$.flops_per_s.{dtype}: must be a positive number of FLOP/s, "
                                f"got {value!r}")
    if "bytes_per_s" in entry and not _positive(entry["bytes_per_s"]):
        problems.append(f"$.bytes_per_s: must be a positive number of bytes/s, got "
                        f"{entry['bytes_per_s']!r}")
    if not problems and not flops and "bytes_per_s" not in entry:
        problems.append("$: gives neither flops_per_s nor bytes_per_s")
    return problems


def read_cache(path: Optional[Path] = None) -> Dict[str, Any]:
    """The cache's entries by machine key ({} when absent or unreadable)."""
    path = path or cache_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def store(key: str, entry: Dict[str, Any], path: Optional[Path] = None) -> Path:
    """Merge ``entry`` into the cache under ``key`` (dtypes measured before are kept)."""
    path = path or cache_path()
    data = read_cache(path)
    old = data.get(key, {})
    merged = {**old, **entry}
    merged["flops_per_s"] = {**old.get("flops_per_s", {}), **entry.get("flops_per_s", {})}
    data[key] = merged
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def cached_peaks(key: str) -> Optional[Peaks]:
    entry = read_cache().get(key)
    if not isinstance(entry, dict) or entry_problems(entry):
        return None
    return Peaks.from_entry(entry, f"{cache_path()} [{key}]")

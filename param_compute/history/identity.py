"""Who measured a results file: its machine identity and its default label, from the header.

The machine of a series is host, device, threads, torch and the peaks fingerprint (the peaks
cache key of that setup, ``measure.peaks.machine_key``, and the ``--peaks`` file when one was
given): numbers of two machines are never one series. The default label is the header's git
commit when it has one (``sys_info.git_commit``), else torch's version and the commit torch was
built from (``sys_info.pytorch_git_version``). The header is untrusted input: every field is
read as text, cut to a bounded length.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from param_compute.measure.peaks import machine_key

#: Longest text kept of one header field.
MAX_FIELD = 200


def _text(value: Any) -> Optional[str]:
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    return text[:MAX_FIELD] if text else None


@dataclass(frozen=True)
class Machine:
    host: str
    device: str
    threads: Optional[int]
    torch: str
    peaks: str

    @property
    def fingerprint(self) -> str:
        facts = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(facts.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """``host device Nt torch V`` (what the tools print)."""
        threads = f" {self.threads}t" if self.threads is not None else ""
        return f"{self.host} {self.device}{threads} torch {self.torch}"

    def facts(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def machine_of(header: Dict[str, Any]) -> Machine:
    """The machine identity of a results header (``sys_info`` and ``run_options``)."""
    info = header.get("sys_info") if isinstance(header.get("sys_info"), dict) else {}
    options = header.get("run_options") if isinstance(header.get("run_options"), dict) else {}
    device = _text(info.get("device")) or _text(options.get("device")) or "cpu"
    device_name = _text(info.get("cuda_device_name")) if device.startswith("cuda") else None
    arch = _text(info.get("machine"))
    shown_device = device_name or (f"{device}/{arch}" if arch else device)
    threads = info.get("pytorch_num_threads", options.get("num_threads"))
    threads = threads if type(threads) is int and 0 < threads < 2**31 else None  # noqa: E721
    torch = _text(info.get("pytorch_version")) or "unknown"
    peaks = machine_key(device_name or shown_device, _text(info.get("cuda_version")) or "-",
                        torch, threads if threads is not None else 0)
    peaks_file = _text(options.get("peaks"))
    if peaks_file:
        peaks += f" | peaks file {peaks_file}"
    return Machine(host=_text(info.get("hostname")) or "unknown", device=shown_device,
                   threads=threads, torch=torch,
                   peaks=hashlib.sha256(peaks.encode()).hexdigest()[:12])


def default_label(header: Dict[str, Any]) -> Optional[str]:
    """The label a results file gets without ``--label`` (None when the header knows none)."""
    info = header.get("sys_info") if isinstance(header.get("sys_info"), dict) else {}
    commit = _text(info.get("git_commit"))
    if commit:
        return commit[:12]
    torch = _text(info.get("pytorch_version"))
    if not torch:
        return None
    built_from = _text(info.get("pytorch_git_version"))
    return f"torch-{torch}" + (f"-{built_from[:10]}" if built_from else "")

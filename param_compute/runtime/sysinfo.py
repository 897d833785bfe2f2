"""The results header's ``sys_info``: what machine and software produced the numbers."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any, Dict, List, Optional

from param_compute.process.allocator import allocator_settings


def sys_info(device: str, include_torch: bool = True,
             num_threads: Optional[int] = None) -> Dict[str, Any]:
    """``num_threads``: the run's intra-op threads (what it sets before measuring), recorded as
    ``pytorch_num_threads``; torch's own default then goes to ``pytorch_default_num_threads``."""
    info: Dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "python_version": sys.version.split()[0],
        "param_compute_version": _version(),
        "device": device,
        "load_average": load_average(),
        "cpu_governor": cpu_governor(),
        "allocator": allocator_settings(),  # the host allocator's environment ({}: defaults)
    }
    commit = git_commit()
    if commit is not None:  # the code being measured: a run's default history label
        info["git_commit"] = commit
    if not include_torch:  # a dry run: torch's version from its package, torch not imported
        from param_compute.operators.name_index import torch_version

        info["pytorch_version"] = torch_version()
    else:
        import torch

        info["pytorch_version"] = torch.__version__
        # the commit torch was built from: part of a run's default history label
        info["pytorch_git_version"] = getattr(torch.version, "git_version", None)
        info["pytorch_num_threads"] = num_threads or torch.get_num_threads()
        if num_threads:
            info["pytorch_default_num_threads"] = torch.get_num_threads()
        info["cuda_available"] = torch.cuda.is_available()
        info["cuda_version"] = torch.version.cuda
        if device.startswith("cuda") and torch.cuda.is_available():
            index = torch.device(device).index or 0
            props = torch.cuda.get_device_properties(index)
            info["cuda_device_name"] = props.name
            info["cuda_device_capability"] = f"{props.major}.{props.minor}"
            info["cuda_device_memory_bytes"] = props.total_memory
            from param_compute.measure.gpu_clocks import clocks_header

            info["gpu_clocks"] = clocks_header(index)  # and a warning when not locked
    return info


def load_average() -> Optional[List[float]]:
    """The 1, 5 and 15 minute load averages (None where the OS has none): a busy machine."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


GOVERNOR = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"


def cpu_governor(path: str = GOVERNOR) -> Optional[str]:
    """CPU 0's frequency governor (``performance``, ``powersave``...); None where there is none
    (a virtual machine, no cpufreq): frequency changes then go unseen (the canary's job)."""
    try:
        with open(path, "rb") as file:
            text = file.read(64).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if text.isprintable() and text else None


#: The most bytes read of a git file (HEAD, a ref, packed-refs).
MAX_GIT_FILE_BYTES = 1 << 20
_HEX = frozenset("0123456789abcdef")


def _git_file(path) -> Optional[str]:
    from param_compute.files import FileRefused, read_bounded

    try:
        return read_bounded(path, MAX_GIT_FILE_BYTES).decode("utf-8", "replace")
    except (FileRefused, OSError):
        return None


def _is_commit(text: Optional[str]) -> bool:
    return text is not None and len(text) in (40, 64) and set(text) <= _HEX


def git_commit(start: Optional[str] = None) -> Optional[str]:
    """The commit checked out in the git work tree around ``start`` (the working directory),
    read from its files (no ``git`` process): HEAD, the branch's ref or ``packed-refs``; None
    outside a work tree or where it cannot tell."""
    from pathlib import Path

    folder = Path(start or os.getcwd()).resolve()
    for place in (folder, *folder.parents):
        dot_git = place / ".git"
        if dot_git.is_file():  # a worktree or submodule: "gitdir: PATH"
            text = (_git_file(dot_git) or "").strip()
            if not text.startswith("gitdir:"):
                return None
            dot_git = (place / text[len("gitdir:"):].strip()).resolve()
        if not dot_git.is_dir():
            continue
        head = (_git_file(dot_git / "HEAD") or "").strip()
        if _is_commit(head):  # detached
            return head
        if not head.startswith("ref: "):
            return None
        ref = head[len("ref: "):].strip()
        common = dot_git
        shared = (_git_file(dot_git / "commondir") or "").strip()
        if shared:  # a linked worktree keeps its refs in the main repository
            common = (dot_git / shared).resolve()
        for where in (dot_git, common):
            value = (_git_file(where / ref) or "").strip()
            if _is_commit(value):
                return value
        for line in (_git_file(common / "packed-refs") or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref and _is_commit(parts[0]):
                return parts[0]
        return None
    return None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("param_compute")
    except Exception:
        return "unknown"

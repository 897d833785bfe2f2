"""One owner per file concern: the source is scanned for file I/O, medians and escaping done
anywhere but in their owner (``files.py``, ``results/stats.py``, ``formatting.py``).

A rule names what it looks for (a pattern in a module's code, comments and strings left out);
``ALLOWED`` lists, per module and rule, the few places that must keep their own, each with its
reason. A new bounded read, atomic write, lock, median or escaping rule anywhere else fails here:
call the owner instead.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Dict, List, Tuple

from conftest import REPO

PACKAGE = REPO / "param_compute"

#: rule -> (what it is, where it belongs, a regular expression over a module's code)
RULES: Dict[str, Tuple[str, str, str]] = {
    "replace": ("an atomic rename", "files.write_new", r"\bos\.(replace|rename)\s*\("),
    "nonblocking": ("a non-blocking open", "files.open_regular / open_write_fd",
                    r"\bO_NONBLOCK\b|\bset_blocking\s*\("),
    "exclusive": ("an exclusive or link-refusing open", "files.open_write_fd",
                  r"\bO_EXCL\b|\bO_NOFOLLOW\b"),
    "lock": ("a file lock", "files.lock_results", r"\bfcntl\b|\bflock\b"),
    "os.open": ("a raw open", "files.py", r"\bos\.open\s*\("),
    "regular check": ("a regular-file check", "files.check_regular / open_regular",
                      r"\bS_ISREG\b"),
    "bounded read": ("a bounded read", "files.read_bounded / read_at_most",
                     r"\.read\([^()]*\+\s*1\s*\)"),
    "open": ("a file opened with open()", "files.read_bounded / open_regular / open_new",
             r"(?<![\w.])(?<!def )open\s*\("),
    "whole file": ("a whole file read or written", "files.read_bounded / write_new",
                   r"\.(read_text|read_bytes|write_text|write_bytes)\s*\("),
    "statistics": ("the statistics module", "results.stats.median",
                   r"\bimport\s+statistics\b|\bfrom\s+statistics\b|\bstatistics\.\w"),
    "median": ("a median of its own", "results.stats.median / lower_median / upper_median",
               r"\bdef\s+_?(lower_|upper_)?median\s*\(|\[\s*len\([^()]*\)\s*//\s*2\s*\]"),
    "escaping": ("an escaping rule of its own", "formatting.printable",
                 r"\bdef\s+printable\s*\(|\b(repr|ascii)\([^()]*\)\[1:-1\]"),
}

#: Modules that own a concern.
OWNERS = {"files.py": {"replace", "nonblocking", "exclusive", "lock", "os.open",
                       "regular check", "bounded read", "open", "whole file"},
          "results/stats.py": {"median", "statistics"},
          "formatting.py": {"escaping"}}

#: (module, rule) -> why it keeps its own.
ALLOWED: Dict[Tuple[str, str], str] = {
    ("runtime/memory_guard.py", "open"): "reads /proc/meminfo and /proc/self/status: kernel "
                                         "files of no size, read line by line",
    ("runtime/sysinfo.py", "open"): "reads a prefix of a /sys file (its size is a page)",
    ("measure/host_memory.py", "open"): "reads /proc/self/statm and status and writes "
                                        "clear_refs: kernel files of no size",
    ("measure/peaks.py", "open"): "reads /proc/cpuinfo line by line for the CPU's name",
    ("process/entry.py", "os.open"): "opens /dev/null to stand in for a closed stdout",
    ("cli/history.py", "open"): "opens /dev/null to discard standard output (--quiet)",
    ("spec/schema.py", "whole file"): "the package's own JSON Schema",
    ("operators/name_index.py", "whole file"): "hashes the package's own rule and workload "
                                               "sources into the index's name",
    ("plugins/loading.py", "whole file"): "parses a plugin's Python source the user asked "
                                          "to load (code it runs anyway)",
    ("analysis/comparison.py", "median"): "_BaseRun.median is a run's median through "
                                          "results.stats.quantile",
}


#: Token types that are prose, not code (f-strings' text parts on Python 3.12).
_PROSE = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def _code(text: str) -> str:
    """A module's code with its comments and strings blanked out (so prose may name anything);
    lines and columns stay where they were."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    chars = list(text)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in _PROSE:
            begin = starts[token.start[0] - 1] + token.start[1]
            end = starts[token.end[0] - 1] + token.end[1]
            for index in range(begin, end):
                if chars[index] != "\n":
                    chars[index] = " "
    return "".join(chars)


def _module(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def offences() -> List[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        code = _code(path.read_text(encoding="utf-8"))
        for rule, (what, owner, pattern) in RULES.items():
            if rule in OWNERS.get(module, ()) or (module, rule) in ALLOWED:
                continue
            for match in re.finditer(pattern, code):
                line = code[:match.start()].count("\n") + 1
                found.append(f"param_compute/{module}:{line}: {what} ({match.group(0).strip()})"
                             f"; use {owner}")
    return found


def test_file_io_medians_and_escaping_have_one_owner_each():
    found = offences()
    assert not found, "done outside its owner:\n  " + "\n  ".join(found)


def test_every_exception_is_still_needed_and_names_a_module():
    """An allowed place that no longer does what it is allowed to is dropped from the list."""
    stale = []
    for (module, rule), reason in ALLOWED.items():
        path = PACKAGE / module
        assert path.is_file(), module
        assert reason.strip(), (module, rule)
        if not re.search(RULES[rule][2], _code(path.read_text(encoding="utf-8"))):
            stale.append(f"{module}: {rule}")
    assert not stale, "allowed but no longer there:\n  " + "\n  ".join(stale)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """Each rule matches its pattern in code, and not in a comment or a string."""
    samples = {"replace": "os.replace(a, b)", "nonblocking": "os.set_blocking(fd, True)",
               "exclusive": "flags = os.O_EXCL", "lock": "fcntl.flock(fd, 1)",
               "os.open": "fd = os.open(p, 0)", "regular check": "stat.S_ISREG(m)",
               "bounded read": "data = stream.read(LIMIT + 1)", "open": "with open(p) as f:",
               "whole file": "Path(p).read_text()", "statistics": "import statistics",
               "median": "x = values[len(values) // 2]", "escaping": "repr(text)[1:-1]"}
    for rule, sample in samples.items():
        pattern = RULES[rule][2]
        assert re.search(pattern, _code(sample + "\n")), rule
        hidden = f"# {sample}\nx = {sample!r}\n"
        assert not re.search(pattern, _code(hidden)), rule
    assert not re.search(RULES["open"][2], _code("open_new(p)\nstore.open(db)\ndef open(cls):\n"))
    assert not re.search(RULES["median"][2], _code("def _bootstrap_median(x):\n"))
    assert ast.parse("x = 1")  # the scan reads source text only: nothing is imported

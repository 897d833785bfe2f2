#!/usr/bin/env python
"""The README's test-suite time against reality: run the suite, compare with the claim.

README's "The tests" says how long ``python -m pytest -q -n auto`` takes on two cores
("... takes about N minutes on two cores"). This script reads that claim (:func:`readme_claim`;
``tests/test_readme.py`` checks it is there and readable), runs the suite (or the pytest
arguments given after ``--``) and prints the claim beside the time pytest reports and the wall
time. Exit status: 0 the measured time is within the claim's tolerance (at most 1.5x the claim
and at least a third of it: a claim far too long is stale too); 1 it is not; 2 the suite failed
or the claim cannot be read.

    python bench/suite_time.py                 # the README's command
    python bench/suite_time.py -- -q -n 2      # other pytest arguments
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
CLAIM = re.compile(r"takes\s+about\s+(\d+(?:\.\d+)?)\s+minutes?\s+on\s+(\w+)\s+cores")
TOLERANCE = (1 / 3, 1.5)


def readme_claim(text: Optional[str] = None) -> Tuple[float, str]:
    """(seconds, cores) the README claims for the suite (ValueError: no claim)."""
    text = text if text is not None else (REPO / "README.md").read_text(encoding="utf-8")
    found = CLAIM.findall(text)
    if len(found) != 1:
        raise ValueError(f"README.md states the suite's time {len(found)} times; one expected "
                         "(\"takes about N minutes on two cores\")")
    minutes, cores = found[0]
    return float(minutes) * 60, cores


def pytest_seconds(output: str) -> Optional[float]:
    """The time pytest reports on its last line (``... passed in 118.52s (0:01:58)``)."""
    found = re.findall(r" in (\d+(?:\.\d+)?)s\b", output)
    return float(found[-1]) if found else None


def main(argv: List[str]) -> int:
    args = argv[argv.index("--") + 1:] if "--" in argv else ["-q", "-n", "auto"]
    try:
        claim, cores = readme_claim()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - start
    measured = pytest_seconds(run.stdout)
    print(f"{'README claim':<28} {claim:>8.0f} s  (on {cores} cores; this machine has "
          f"{os.cpu_count()})")
    print(f"{'pytest ' + ' '.join(args):<28} {measured or float('nan'):>8.0f} s  "
          f"(wall {wall:.0f} s)")
    if run.returncode != 0 or measured is None:
        print(run.stdout[-3000:], run.stderr[-2000:], sep="\n")
        return 2
    low, high = claim * TOLERANCE[0], claim * TOLERANCE[1]
    ok = low <= measured <= high
    print(f"{'within':<28} {low:>8.0f} – {high:.0f} s: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

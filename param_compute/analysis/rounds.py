"""Results files of several rounds (processes) of the same setup joined into one results file,
one record per run, its samples from every round.

``python -m param_compute.ab`` runs each side once per round; :func:`join_rounds` writes the
side's ordinary results file from its round files (read with ``results.file``, written with
``write_results``). Each run's records of the rounds are combined by the one rule that also
combines ``--repetitions`` (``results.combine``): every sample kept, the median and its
interval taken across rounds (``repetition_medians`` holds each round's median), throughput
and targets following that median; a run that failed in any round is that round's record, its
message saying which round. Torch-free.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from param_compute.results.combine import combine
from param_compute.results.fields import run_of
from param_compute.results.file import read_results_warned, write_results
from param_compute.results.records import RunRecord


class RoundsError(ValueError):
    """Round files that cannot be joined (one is missing or not a results file)."""


def join_records(records: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """One run's record from its records of every round (in round order), by the one rule
    that also combines ``--repetitions`` (``results.combine``)."""
    joined = combine([RunRecord.from_json(record) for record in records], unit="round")
    return joined.to_json()


def _read(path: Path):
    from param_compute.results.file import ResultsFileError

    try:
        return read_results_warned(path)  # each unusable line said: FILE:LINE: what
    except ResultsFileError as exc:
        raise RoundsError(str(exc)) from None


def join_rounds(paths: Sequence[Path], out: Path, extra_header: Dict[str, Any]) -> int:
    """Write ``out`` from the round files ``paths``: the first round's header (plus
    ``extra_header``), one joined record per run in the first round's order (runs a later
    round adds after them), a finish line with the counts. Returns the number of runs."""
    rounds = [_read(Path(path)) for path in paths]
    by_run: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for results in rounds:  # the records (the step replay's too), each by its run key
        for record in results.records:
            by_run.setdefault(run_of(record), []).append(record)
    lines = [join_records(records) for records in by_run.values()]
    header = dict(rounds[0].header, **extra_header)
    ok = sum(1 for line in lines if line.get("status", "ok") == "ok")
    finish = {"finish_time": datetime.now().isoformat(timespec="seconds"), "runs_ok": ok,
              "runs_failed": len(lines) - ok, "rounds": len(rounds)}
    write_results(out, header, lines, finish)
    return len(lines)

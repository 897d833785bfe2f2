"""``python -m param_compute.run_batch --batch-file F``: the profiled child of ``--ncu``/``--nsys``.

Replays exactly the runs of one batch (see ``nsight``): same operator, build, input configs, ids
and seed as the main run, hence the same data; each measured iteration in an NVTX range
``param_compute|OP|ID|iteration|PASS``. It prints one line per run and writes no results file.

Exit status: 0 every run measured, 1 some run failed, 2 the batch file is unusable.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from .errors import EXIT_INVALID, EXIT_RUN_FAILED, OptionsError, SpecError
from .expansion import PlannedRun
from .nsight import BATCH_FORMAT, options_from_json

log = logging.getLogger("param_compute")

_REQUIRED = ("op_name", "config_index", "build_id", "runs", "op_spec", "options")


class BatchFileError(Exception):
    pass


def read_batch(path: Path) -> Dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BatchFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BatchFileError(f"{path}: not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != BATCH_FORMAT:
        raise BatchFileError(f"{path}: not a {BATCH_FORMAT} batch file")
    missing = [key for key in _REQUIRED if key not in document]
    if missing:
        raise BatchFileError(f"{path}: missing {', '.join(missing)}")
    return document


def planned_runs(document: Dict[str, Any]) -> List[PlannedRun]:
    """The batch's runs as the main run planned them (operator index 0: the child's spec holds
    this one operator); each id is checked against the one the main run recorded."""
    runs = []
    for entry in document["runs"]:
        run = PlannedRun(document["op_name"], 0, int(document["config_index"]),
                         str(document["build_id"]), document.get("build"), str(entry["input_id"]),
                         entry["input"])
        if entry.get("id") is not None and entry["id"] != run.id:
            raise BatchFileError(f"run id {entry['id']!r} does not match its parts ({run.id!r})")
        runs.append(run)
    return runs


def _summary(record) -> str:
    if record.status != "ok":
        error = record.error
        return f"{record.status} ({error.phase}): {error.type}: {error.message}" if error \
            else record.status
    parts = []
    for name, stats in record.stats().items():
        if stats:
            parts.append(f"{name} median {stats['median']:.4g} ms (n={stats['n']})")
    return "ok" + (": " + ", ".join(parts) if parts else "")


def replay(document: Dict[str, Any]) -> int:
    from .devices import check_device
    from .executor import Executor
    from .session import Toolchain

    toolchain = Toolchain.start([Path(d) for d in document.get("workloads_dirs") or ()])
    source = f"{document.get('source') or '<batch>'} (batch)"
    spec = toolchain.validate({document["op_name"]: document["op_spec"]}, source)
    options = options_from_json(document["options"]).check()
    check_device(options.device)
    runs = planned_runs(document)
    executor = Executor(SimpleNamespace(options=options, registries=toolchain.registries,
                                        spec=spec, factories=toolchain.resolver.factory))
    failed = 0
    try:
        for run in runs:
            record = executor.execute(run)
            failed += record.status != "ok"
            print(f"{run.key}: {_summary(record)}", flush=True)
    finally:
        executor.close()
    print(f"batch done: {len(runs) - failed} measured, {failed} failed", flush=True)
    return EXIT_RUN_FAILED if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m param_compute.run_batch",
        description="Replay one batch of runs (the child that --ncu/--nsys profile).")
    parser.add_argument("--batch-file", type=Path, required=True,
                        help="the batch (JSON) written by the main run")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    log.handlers[:] = [handler]
    log.propagate = False
    try:
        document = read_batch(args.batch_file)
        log.setLevel(document.get("log_level") or "INFO")
        return replay(document)
    except (BatchFileError, SpecError, OptionsError, KeyError, TypeError, ValueError) as exc:
        log.debug("unusable batch", exc_info=True)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())

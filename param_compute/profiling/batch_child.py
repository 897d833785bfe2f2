"""``python -m param_compute.run_batch --batch-file F``: the profiled child of ``--ncu``/``--nsys``.

Replays exactly the runs of one batch (see ``nsight``): same operator, build, input configs, ids
and seed as the main run, hence the same data; each measured iteration in an NVTX range
``param_compute|OP|ID|iteration|PASS``. It prints one line per run and writes no results file.

It also reads PARAM's batch files (``{op_name, config_build_id, op_info, run_options}``, what
PARAM's run_benchmark hands its ncu/nsys children) with PARAM's spelling: ``-f/--file F``,
``-s/--shm NAME`` (a shared-memory block holding the JSON) and ``-v/--verbose``.

Exit status: 0 every run measured, 1 some run failed, 2 the batch file is unusable.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional

from param_compute.errors import EXIT_INVALID, EXIT_RUN_FAILED, OptionsError, SpecError
from param_compute.files import read_bounded
from param_compute.plan.runkey import RunKeyError, parse_config_build
from param_compute.plan.runplan import PlannedRun
from param_compute.profiling.nsight import BATCH_FORMAT
from param_compute.process.lifeline import watch_parent
from param_compute.runtime.child import ChildReplay, ChildSetupError, setup
from param_compute.runtime.options import RunOptions

log = logging.getLogger("param_compute")

#: The largest batch file read (the run's plan for a batch of runs: some KB).
MAX_BATCH_BYTES = 256 << 20
_REQUIRED = ("op_name", "config_index", "build_id", "runs", "op_spec", "options")


class BatchFileError(Exception):
    pass


def read_batch(path: Path) -> Dict[str, Any]:
    try:
        document = json.loads(read_bounded(path, MAX_BATCH_BYTES))
    except OSError as exc:
        raise BatchFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BatchFileError(f"{path}: not JSON: {exc}") from None
    return checked_batch(document, str(path))


def checked_batch(document: Any, source: str) -> Dict[str, Any]:
    """Our batch document, as read or converted from PARAM's form; BatchFileError if neither."""
    path = source
    if isinstance(document, dict) and "format" not in document and \
            all(key in document for key in _PARAM_REQUIRED) and \
            ("config_build_id" in document or "build_id" in document):
        document = from_param_batch(document, source)
    if not isinstance(document, dict) or document.get("format") != BATCH_FORMAT:
        raise BatchFileError(f"{path}: not a {BATCH_FORMAT} batch file, nor PARAM's (with "
                             f"{', '.join(_PARAM_REQUIRED)} and config_build_id)")
    missing = [key for key in _REQUIRED if key not in document]
    if missing:
        raise BatchFileError(f"{path}: missing {', '.join(missing)}")
    return document


_PARAM_REQUIRED = ("op_name", "op_info", "run_options")


def from_param_batch(batch: Dict[str, Any], source: str) -> Dict[str, Any]:
    """PARAM's batch (one build of one config, its queued inputs each with its ``id``) as ours.

    ``config_build_id`` is ``"CONFIG|BUILD"`` (PARAM's older files, its shipped example among
    them, have ``build_id`` and ``"CONFIG:BUILD"``); a missing ``op_exec_mode`` means discrete;
    ``pass_type`` is PARAM's enum value or its ``str()``.
    """
    op_info = batch["op_info"]
    if not isinstance(op_info, dict) or not isinstance(op_info.get("config"), list) \
            or not op_info["config"] or not isinstance(op_info["config"][0], dict):
        raise BatchFileError(f"{source}: op_info.config must hold one config entry")
    key = "config_build_id" if "config_build_id" in batch else "build_id"
    try:
        config_id, build_id = parse_config_build(batch[key])
    except RunKeyError:
        raise BatchFileError(f"{source}: {key} {batch[key]!r} is not CONFIG|BUILD") from None
    entry = op_info["config"][0]
    inputs = entry.get("input")
    if not isinstance(inputs, list) or not all(isinstance(item, dict) for item in inputs):
        raise BatchFileError(f"{source}: op_info.config[0].input must be a list of objects")
    runs, plain = [], []
    for counter, item in enumerate(inputs):
        config = {key: value for key, value in item.items() if key != "id"}
        runs.append({"input_id": str(item.get("id", counter)), "input": config})
        plain.append(config)
    build = entry.get("build") or None
    op_spec = {key: op_info[key] for key in ("build_iterator", "input_iterator",
                                             "build_data_generator", "input_data_generator")
               if op_info.get(key) is not None}
    op_spec["config"] = [{"build": [build] if build else [], "input": plain}]
    if not isinstance(batch["run_options"], dict):
        raise BatchFileError(f"{source}: run_options must be an object")
    options = replace(RunOptions.from_param(batch["run_options"]), nvtx_iterations=True)
    return {"format": BATCH_FORMAT, "op_name": batch["op_name"], "config_index": int(config_id),
            "build_id": build_id, "build": build, "runs": runs, "op_spec": op_spec,
            "options": options.to_json(), "source": source}


def read_shared_memory(name: str) -> Any:
    """The JSON document PARAM's run_benchmark put in a shared-memory block."""
    from multiprocessing import resource_tracker, shared_memory

    try:
        block = shared_memory.SharedMemory(name)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise BatchFileError(f"shared memory {name!r}: {exc}") from None
    try:
        # The creator frees the block; this process must not have the tracker free it too.
        resource_tracker.unregister(block._name, "shared_memory")  # noqa: SLF001
        data = bytes(block.buf).rstrip(b"\0")
    finally:
        block.close()
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise BatchFileError(f"shared memory {name!r}: not JSON: {exc}") from None


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
    """Measure the batch's runs with the child side ``runtime.child`` rebuilds from it."""
    options = dict(document["options"])
    if document.get("workloads_dirs") and not options.get("workloads_dirs"):
        options["workloads_dirs"] = list(document["workloads_dirs"])  # a batch of an older run
    source = f"{document.get('source') or '<batch>'} (batch)"
    runs = planned_runs(document)
    child = ChildReplay.start(setup({document["op_name"]: document["op_spec"]}, source, options))
    failed = 0
    try:
        for run in runs:
            record = child.execute(run)
            failed += record.status != "ok"
            print(f"{run.key}: {_summary(record)}", flush=True)
    finally:
        child.close()
    print(f"batch done: {len(runs) - failed} measured, {failed} failed", flush=True)
    return EXIT_RUN_FAILED if failed else 0


def build_parser(prog: str = "python -m param_compute.run_batch") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Replay one batch of runs (the child that --ncu/--nsys profile).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--batch-file", "-f", "--file", type=Path, dest="batch_file",
                        help="the batch (JSON) written by the main run, or a PARAM batch file")
    source.add_argument("-s", "--shm", help="PARAM's form: a shared-memory block's name")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    parser.add_argument("-d", "--device", help="replay on this device instead of the batch's")
    return parser


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.run_batch") -> int:
    args = build_parser(prog).parse_args(argv)
    watch_parent()  # launched by a profiler: ends when the run that launched it is gone
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    log.handlers[:] = [handler]
    log.propagate = False
    try:
        document = (read_batch(args.batch_file) if args.batch_file is not None
                    else checked_batch(read_shared_memory(args.shm), f"shm:{args.shm}"))
        if args.device:
            document["options"] = dict(document["options"], device=args.device)
        log.setLevel("DEBUG" if args.verbose else document.get("log_level") or "INFO")
        return replay(document)
    except (BatchFileError, ChildSetupError, SpecError, OptionsError, KeyError, TypeError,
            ValueError) as exc:
        log.debug("unusable batch", exc_info=True)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())

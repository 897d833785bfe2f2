"""``python -m param_compute.merge -o OUT SHARD...``: join shard results into one results file.

The shard files (written under ``--shard I/N`` or ``torchrun``) must come from the same plan (the
same spec, the same shard count) and together hold every shard once. The merged file is an
ordinary results file: a header that lists the shards, the runs in the order the unsharded run
would have written them, and a last line with the summed counts. A run id appearing twice is
kept once when both records are identical and is an error when they differ.

Exit status: 0 merged; 2 a file is missing or not a shard results file, the shards do not fit
together, or two records of one run conflict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from param_compute.plan.runkey import id_order, key_of
from param_compute.results.fields import run_of
from param_compute.results.file import (ResultsFile, ResultsFileError, read_results_warned,
                                        write_results)


class MergeError(Exception):
    pass


#: The most shards a merge accepts (a hostile header's count must not size a loop).
MAX_SHARDS = 1 << 16


def _shard_info(results: ResultsFile) -> Dict[str, Any]:
    shard = results.header.get("shard")
    if not isinstance(shard, dict) or "index" not in shard or "count" not in shard:
        raise MergeError(f"{results.path}: not a shard file (its header has no shard entry); "
                         "merge joins files written with --shard I/N or under torchrun")
    count, index = shard["count"], shard["index"]
    if not (type(count) is int and 1 <= count <= MAX_SHARDS):  # noqa: E721 (bool is no count)
        raise MergeError(f"{results.path}:1: shard count {str(count)[:40]} is not a whole "
                         f"number from 1 to {MAX_SHARDS}")
    if not (type(index) is int and 0 <= index < count):  # noqa: E721
        raise MergeError(f"{results.path}:1: shard index {str(index)[:40]} is not a whole "
                         f"number from 0 to {count - 1}")
    return shard


def merge_shards(shards: List[ResultsFile], partial: bool = False
                 ) -> Tuple[Dict[str, Any], List[Dict[str, Any]], Dict[str, Any]]:
    """(header, records in plan order, last line) of the merged results."""
    if not shards:
        raise MergeError("no shard files given")
    infos = [_shard_info(s) for s in shards]
    first = infos[0]
    by_index: Dict[int, ResultsFile] = {}
    for results, info in zip(shards, infos):
        if info["count"] != first["count"]:
            raise MergeError(f"{results.path} is shard {info['index']} of {info['count']}, "
                             f"{shards[0].path} of {first['count']}: not the same sharding")
        if info.get("plan_digest") != first.get("plan_digest"):
            raise MergeError(f"{results.path} and {shards[0].path} come from different plans "
                             "(another spec or other options)")
        if bool(results.run_options.get("dry_run")) != bool(shards[0].run_options.get(
                "dry_run")):
            raise MergeError(f"{results.path} and {shards[0].path}: one is a dry run, the "
                             "other is not")
        if info["index"] in by_index:
            raise MergeError(f"shard {info['index']} given twice: {by_index[info['index']].path} "
                             f"and {results.path}")
        by_index[info["index"]] = results
    missing = [i for i in range(first["count"]) if i not in by_index]
    if missing and not partial:
        listed = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
        raise MergeError(f"missing shard(s) {listed} of {first['count']} "
                         "(pass --partial to merge what there is)")

    ops = list(first.get("ops") or [])
    natural = all(info.get("order", "natural") == "natural" for info in infos)
    positions: Dict[str, int] = {}
    if not natural:
        for info in infos:
            positions.update(info.get("positions") or {})

    kept: Dict[Tuple[str, str], Tuple[Dict[str, Any], Path]] = {}
    for index in sorted(by_index):
        results = by_index[index]
        for record in results.records:
            key = run_of(record)
            if key in kept:
                other, where = kept[key]
                if json.dumps(other, sort_keys=True) != json.dumps(record, sort_keys=True):
                    raise MergeError(f"run {key_of(*key)} is in {where} and {results.path} "
                                     "with different results")
                continue
            kept[key] = (record, results.path)

    places = {name: place for place, name in reversed(list(enumerate(ops)))}

    def order(key: Tuple[str, str]):
        if natural:
            return id_order(places, *key)
        return positions.get(key_of(*key), len(positions))

    records = [kept[key][0] for key in sorted(kept, key=order)]

    listed = []
    for index in sorted(by_index):
        results = by_index[index]
        finish = results.finish or {}
        listed.append({"file": str(results.path), "index": index,
                       "runs": len(results.records),
                       "device": results.run_options.get("device"),
                       "hostname": results.sys_info.get("hostname"),
                       "source": results.header["shard"].get("source"),
                       "start_time": results.header.get("start_time"),
                       "finish_time": finish.get("finish_time"),
                       "estimated_cost": results.header["shard"].get("estimated_cost")})
    base = by_index[min(by_index)].header
    header = {"run_options": base.get("run_options"), "sys_info": base.get("sys_info"),
              "start_time": min((s["start_time"] for s in listed if s["start_time"]),
                                default=None),
              "merged_shards": {"count": first["count"], "total_runs": first.get("total_runs"),
                                "plan_digest": first.get("plan_digest"), "missing": missing,
                                "shards": listed}}
    finishes = [by_index[i].finish or {} for i in sorted(by_index)]
    last = {"finish_time": max((f.get("finish_time") for f in finishes
                                if f.get("finish_time")), default=None),
            "runs_ok": sum(f.get("runs_ok", 0) for f in finishes),
            "runs_failed": sum(f.get("runs_failed", 0) for f in finishes),
            "runs_dry": sum(f.get("runs_dry", 0) for f in finishes),
            "merged": len(by_index)}
    incomplete = [str(by_index[i].path) for i in sorted(by_index) if by_index[i].finish is None]
    if incomplete:
        last["incomplete_shards"] = incomplete
    return header, records, last


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m param_compute.merge",
        description="Join the results files of a sharded run into one, in the unsharded "
                    "run's order.")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the merged file")
    parser.add_argument("shards", type=Path, nargs="+", help="shard results files")
    parser.add_argument("--partial", action="store_true",
                        help="merge even when some shards are missing")
    args = parser.parse_args(argv)
    try:
        shards = [read_results_warned(path) for path in args.shards]
        header, records, last = merge_shards(shards, args.partial)
        if args.output.resolve() in {path.resolve() for path in args.shards}:
            raise MergeError(f"-o {args.output} is one of the shard files")
        write_results(args.output, header, records, last)
    except (ResultsFileError, MergeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    shards_text = ", ".join(f"{s['index']}: {s['runs']}" for s in header["merged_shards"]["shards"])
    print(f"{args.output}: {len(records)} runs from {len(shards)} shards (runs per shard "
          f"{shards_text})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

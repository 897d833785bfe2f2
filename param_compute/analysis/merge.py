"""``python -m param_compute.merge -o OUT SHARD...``: join shard results into one results file.

The shard files (written under ``--shard I/N`` or ``torchrun``) must come from the same plan (the
same spec, the same shard count) and together hold every shard once. The merged file is an
ordinary results file: a header that lists the shards, the runs in the order the unsharded run
would have written them, and a last line with the summed counts. A run id appearing twice is
kept once when both records are identical and is an error when they differ.

Every line of every shard must be usable: a damaged line (not JSON, wrong types, a torn last
line, a duplicate run within one shard) stops the merge with exit 1, each named ``FILE:LINE``;
``--skip-damaged`` merges without them and lists each skipped line on stderr.

Each shard is read once, keeping per run only where its line is and a digest of it (memory by
runs, not bytes); the runs are then copied into the merged file in plan order, each line read
back and checked again.

Exit status: 0 merged; 1 a shard holds an unusable line (without ``--skip-damaged``); 2 a file
is missing or not a shard results file, the shards do not fit together, or two records of one
run conflict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from param_compute.plan.runkey import id_order, key_of
from param_compute.results.fields import run_of
from param_compute.results.file import (LineProblem, LineReader, ResultsFileError,
                                        ResultsStream, write_results)

EXIT_OK, EXIT_DAMAGED, EXIT_INVALID = 0, 1, 2


class MergeError(Exception):
    pass


#: The most shards a merge accepts (a hostile header's count must not size a loop).
MAX_SHARDS = 1 << 16


def _shard_info(results: ResultsStream) -> Dict[str, Any]:
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


def _digest(record: Dict[str, Any]) -> bytes:
    """Identity of a record's content (key order aside): equal digests, identical records."""
    text = json.dumps(record, sort_keys=True, allow_nan=True, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a kept run's line is: which shard, which line (number, byte offset, size), and
    its digest."""

    shard: int
    number: int
    offset: int
    size: int
    digest: bytes
    ms_per_unit: float = 1.0  # the unit its shard's header declared (read in milliseconds)


def _check_fit(shards: List[ResultsStream], partial: bool
               ) -> Tuple[Dict[int, ResultsStream], List[Dict[str, Any]], List[int]]:
    """(shards by index, their shard entries, missing indexes); MergeError when they do not
    come from one sharded plan."""
    if not shards:
        raise MergeError("no shard files given")
    infos = [_shard_info(s) for s in shards]
    first = infos[0]
    by_index: Dict[int, ResultsStream] = {}
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
    return by_index, infos, missing


def merge_shards(shards: List[ResultsStream], partial: bool = False
                 ) -> Tuple[Dict[str, Any], List[Tuple[Path, _Place]], Dict[str, Any]]:
    """(header, where each run's line is in plan order, last line) of the merged results;
    each shard read once (its unusable lines go to the stream's ``on_problem``)."""
    by_index, infos, missing = _check_fit(shards, partial)
    first = infos[0]
    ops = list(first.get("ops") or [])
    natural = all(info.get("order", "natural") == "natural" for info in infos)
    positions: Dict[str, int] = {}
    if not natural:
        for info in infos:
            positions.update(info.get("positions") or {})

    kept: Dict[Tuple[str, str], _Place] = {}
    for index in sorted(by_index):
        results = by_index[index]
        for _, record in results:
            key = run_of(record)
            line = results.line  # its place only: the parsed record is not kept
            place = _Place(index, line.number, line.offset, line.size, _digest(record),
                           line.ms_per_unit)
            other = kept.get(key)
            if other is not None:
                if other.digest != place.digest:
                    raise MergeError(f"run {key_of(*key)} is in {by_index[other.shard].path} "
                                     f"and {results.path} with different results")
                continue
            kept[key] = place

    places = {name: place for place, name in reversed(list(enumerate(ops)))}

    def order(key: Tuple[str, str]):
        if natural:
            return id_order(places, *key)
        return positions.get(key_of(*key), len(positions))

    ordered = [(by_index[kept[key].shard].path, kept[key]) for key in sorted(kept, key=order)]

    listed = []
    for index in sorted(by_index):
        results = by_index[index]
        finish = results.finish or {}
        listed.append({"file": str(results.path), "index": index,
                       "runs": results.records_read,
                       "device": results.run_options.get("device"),
                       "hostname": results.sys_info.get("hostname"),
                       "source": results.header["shard"].get("source"),
                       "start_time": results.header.get("start_time"),
                       "finish_time": finish.get("finish_time"),
                       "estimated_cost": results.header["shard"].get("estimated_cost")})
    base = by_index[min(by_index)].header
    header = {"run_options": base.get("run_options"), "sys_info": base.get("sys_info"),
              "start_time": min((s["start_time"] for s in listed
                                 if isinstance(s["start_time"], str)), default=None),
              "merged_shards": {"count": first["count"], "total_runs": first.get("total_runs"),
                                "plan_digest": first.get("plan_digest"), "missing": missing,
                                "shards": listed}}
    finishes = [by_index[i].finish or {} for i in sorted(by_index)]
    last = {"finish_time": max((f.get("finish_time") for f in finishes
                                if isinstance(f.get("finish_time"), str)), default=None),
            "runs_ok": sum(_count(f, "runs_ok") for f in finishes),
            "runs_failed": sum(_count(f, "runs_failed") for f in finishes),
            "runs_dry": sum(_count(f, "runs_dry") for f in finishes),
            "merged": len(by_index)}
    incomplete = [str(by_index[i].path) for i in sorted(by_index) if by_index[i].finish is None]
    if incomplete:
        last["incomplete_shards"] = incomplete
    return header, ordered, last


def _count(finish: Dict[str, Any], key: str) -> int:
    """A finish line's count (0 where it is not a whole number: a hand-edited shard)."""
    value = finish.get(key, 0)
    return value if type(value) is int else 0  # noqa: E721 (bool is no count)


def _records(ordered: List[Tuple[Path, _Place]], reader: LineReader) -> Iterator[Dict[str, Any]]:
    """The kept runs' records, read back from their shards in plan order."""
    for path, place in ordered:
        record = reader.read(path, place.number, place.offset, place.size, place.ms_per_unit)
        if _digest(record) != place.digest:
            raise ResultsFileError(f"{path}:{place.number}: changed while being merged")
        yield record


def build_parser(prog: str = "python -m param_compute.merge") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Join the results files of a sharded run into one, in the unsharded "
                    "run's order.")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the merged file")
    parser.add_argument("shards", type=Path, nargs="+", help="shard results files")
    parser.add_argument("--partial", action="store_true",
                        help="merge even when some shards are missing")
    parser.add_argument("--skip-damaged", action="store_true",
                        help="merge even when a shard holds unusable lines (damaged JSON, "
                             "wrong types, a torn last line), listing each one skipped")
    return parser


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.merge") -> int:
    args = build_parser(prog).parse_args(argv)
    damaged: List[str] = []

    def on_problem(path: Path, problem: LineProblem) -> None:
        damaged.append(problem.describe(path))
        print(f"{'skipped' if args.skip_damaged else 'error'}: {problem.describe(path)}",
              file=sys.stderr)

    reader = LineReader()
    written = False
    try:
        if args.output.resolve() in {path.resolve() for path in args.shards}:
            raise MergeError(f"-o {args.output} is one of the shard files")
        shards = [ResultsStream(path, on_problem=on_problem) for path in args.shards]
        header, ordered, last = merge_shards(shards, args.partial)
        if damaged and not args.skip_damaged:
            print(f"error: {len(damaged)} unusable line(s) in the shards; nothing merged "
                  "(--skip-damaged merges without them)", file=sys.stderr)
            return EXIT_DAMAGED
        written = True
        write_results(args.output, header, _records(ordered, reader), last)
    except (ResultsFileError, MergeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if written:
            _remove_partial(args.output)
        return EXIT_INVALID
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        if written:
            _remove_partial(args.output)
        return EXIT_INVALID
    finally:
        reader.close()
    shards_text = ", ".join(f"{s['index']}: {s['runs']}" for s in header["merged_shards"]["shards"])
    skipped = f"; {len(damaged)} damaged line(s) skipped" if damaged else ""
    print(f"{args.output}: {len(ordered)} runs from {len(shards)} shards (runs per shard "
          f"{shards_text}){skipped}")
    return EXIT_OK


def _remove_partial(path: Path) -> None:
    """Remove a merged file cut short (a shard changed under the merge, a full disk)."""
    try:
        path.unlink()
        print(f"error: {path} removed (incomplete)", file=sys.stderr)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())

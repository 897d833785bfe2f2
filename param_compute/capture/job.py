"""One spec for a job: every rank's captured step joined, its collectives paired across ranks.

``capture --from-et A --kineto KA --from-et B --kineto KB -o JOB.json`` captures each rank's
trace as a workload of its own (``capture.trace.execution_trace``; a live run under torchrun
gives one per rank too), then ``JobCapture`` joins them:

* **The ranks.** Each trace's rank is its Kineto ``distributedInfo``'s, else its place in the
  command line; the world size is ``distributedInfo``'s, else the number of traces. Every rank
  of the world must be given, each once (a job replays all of them or none).
* **Compute configs** of all ranks are one list: a config the ranks share (DDP's replicas run
  the same ones) is written once, ``ranks`` saying how often each rank ran it and its times
  there (``spec.job``), ``count`` the total.
* **Collectives** are paired: the ranks of a group issue its collectives in the same order, so
  the k-th on a group of each member is one collective of the job. Its config holds the first
  member's arguments, and any other member's own where they differ (an uneven all-to-all's
  split sizes); a pairing that repeats is one config with a count. Members issuing different
  numbers or kinds of collectives on one group cannot be replayed together: refused, naming
  the group. Sends and receives stay each rank's own (replayed in the step only).
* **The step file** (version 2) holds each rank's calls, their dataflow and waits; the spec
  ``__process_groups__`` (each group's ranks, backend and description, from ``pg_config``;
  without one, the default group ``0`` of every rank); the report each rank's capture with its
  coverage of the original time and its communication time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from param_compute.capture.accounting import OriginalTimes
from param_compute.capture.coverage import summary_lines
from param_compute.capture.step.original import step_original
from param_compute.capture.trace.comms import DEFAULT_GROUP
from param_compute.capture.workload import COLLECTIVE_SCHEMA, CapturedWorkload, report_path
from param_compute.formatting import printable
from param_compute.operators.collectives import kind_of
from param_compute.plan.job import STEP_ONLY
from param_compute.plan.runkey import format_key
from param_compute.spec.job import PROCESS_GROUPS_KEY
from param_compute.spec.model import DEFAULT_DATA_GENERATOR
from param_compute.spec.reserved import CAPTURE_KEY
from param_compute.spec.step_file import step_path, write_step_file

#: (op, schema, signature) of a compute config; (op, ((rank, signature), ...)) of a collective.
Identity = Tuple[Any, ...]


class JobError(ValueError):
    """Traces that cannot make one job (ranks missing or twice, collectives that disagree)."""


def rank_of(workload: CapturedWorkload, place: int) -> Tuple[int, Optional[int]]:
    """(the trace's rank, the world size it says), from its ``distributedInfo`` where it has
    one, else (its place on the command line, None)."""
    info = workload.distributed or {}
    if "rank" in info:
        return info["rank"], info["world_size"]
    return place, None


class JobCapture:
    """Several ranks' workloads joined into one job (see the module's doc)."""

    def __init__(self, workloads: Sequence[CapturedWorkload], sources: Sequence[str]):
        if not workloads:
            raise JobError("no rank's capture to make a job of")
        ranked: Dict[int, CapturedWorkload] = {}
        worlds = set()
        for place, workload in enumerate(workloads):
            rank, world = rank_of(workload, place)
            if world is not None:
                worlds.add(world)
            if rank in ranked:
                raise JobError(f"{sources[place]} and an earlier trace are both rank {rank} "
                               "(distributedInfo): give each rank's trace once")
            ranked[rank] = workload
        if len(worlds) > 1:
            raise JobError(f"the traces say different world sizes ({sorted(worlds)}): they "
                           "are not of one job")
        self.world_size = worlds.pop() if worlds else len(workloads)
        missing = [r for r in range(self.world_size) if r not in ranked]
        if missing or any(r >= self.world_size for r in ranked):
            raise JobError(f"a job of {self.world_size} ranks: "
                           + (f"no trace of rank(s) {', '.join(map(str, missing))} (give every "
                              "rank's, --from-et TRACE --kineto KINETO for each)" if missing
                              else "a trace of a rank outside it"))
        self.ranks = [ranked[r] for r in range(self.world_size)]
        self.sources = [workloads.index(w) for w in self.ranks]
        self.source_names = [sources[i] for i in self.sources]
        self.groups = self._groups()
        self._join()

    # -- joining ---------------------------------------------------------------------------
    def _groups(self) -> Dict[str, Dict[str, Any]]:
        groups: Dict[str, Dict[str, Any]] = {}
        for workload in self.ranks:
            for name, group in ((workload.distributed or {}).get("groups") or {}).items():
                groups.setdefault(name, dict(group))
        if DEFAULT_GROUP not in groups:
            groups[DEFAULT_GROUP] = {"ranks": list(range(self.world_size)), "backend": "",
                                     "desc": "default_pg (assumed: the trace names none)"}
        return groups

    def _join(self) -> None:
        #: identity -> {"op", "schema", "ranks": {rank: [entry, calls...]}} in first-seen order
        self.configs: Dict[Identity, Dict[str, Any]] = {}
        self.call_identity: Dict[Tuple[int, int], Identity] = {}
        for rank, workload in enumerate(self.ranks):
            for op, schema, key, entry in workload.entries():
                if schema == COLLECTIVE_SCHEMA:
                    continue
                config = self.configs.setdefault((op, schema, key), {
                    "op": op, "schema": schema, "ranks": {}})
                config["ranks"][rank] = {"entry": entry, "calls": []}
        sequences: Dict[str, Dict[int, List[Tuple[int, str, str, Dict[str, Any]]]]] = {}
        for rank, workload in enumerate(self.ranks):
            for index, call in enumerate(workload.step.calls):
                op, schema, key = call["config"]
                if schema != COLLECTIVE_SCHEMA:
                    self.call_identity[(rank, index)] = (op, schema, key)
                    continue
                entry = workload._ops[op][schema][key]
                kind = kind_of(op)
                if kind is not None and kind.name in STEP_ONLY:  # each rank's own
                    identity = (op, ((rank, key),))
                    self._collective(identity, op, rank, entry, call)
                    self.call_identity[(rank, index)] = identity
                    continue
                group = str(((entry["kwargs"].get("group") or {}).get("value")) or DEFAULT_GROUP)
                sequences.setdefault(group, {}).setdefault(rank, []).append(
                    (index, op, key, entry))
        for group, per_rank in sequences.items():
            self._pair(group, per_rank)

    def _pair(self, group: str, per_rank: Dict[int, List[Tuple[int, str, str, Dict]]]) -> None:
        members = self.groups.get(group, {}).get("ranks") or sorted(per_rank)
        lengths = {r: len(per_rank.get(r, [])) for r in members}
        if len(set(lengths.values())) > 1:
            raise JobError(f"group {group}: its ranks issued different numbers of collectives "
                           f"({', '.join(f'rank {r}: {n}' for r, n in lengths.items())}): the "
                           "traces are not of one step (record the same step on every rank)")
        for position in range(next(iter(lengths.values()), 0)):
            calls = {r: per_rank[r][position] for r in members}
            ops = {call[1] for call in calls.values()}
            if len(ops) > 1:
                raise JobError(f"group {group}: collective {position} is "
                               f"{' / '.join(sorted(ops))} on different ranks: the traces "
                               "are not of one step")
            op = ops.pop()
            identity = (op, tuple((r, calls[r][2]) for r in members))
            for rank, (index, _, _, entry) in calls.items():
                call = self.ranks[rank].step.calls[index]
                self._collective(identity, op, rank, entry, call)
                self.call_identity[(rank, index)] = identity

    def _collective(self, identity: Identity, op: str, rank: int, entry: Dict[str, Any],
                    call: Dict[str, Any]) -> None:
        config = self.configs.setdefault(identity, {"op": op, "schema": COLLECTIVE_SCHEMA,
                                                    "ranks": {}})
        config["ranks"].setdefault(rank, {"entry": entry, "calls": []})["calls"].append(call)

    # -- the spec --------------------------------------------------------------------------
    def run_keys(self) -> Dict[Identity, str]:
        """identity -> run key: configs grouped by op then schema, in first-seen order."""
        schemas: Dict[str, List[str]] = {}
        inputs: Dict[Tuple[str, str], int] = {}
        keys = {}
        for identity, config in self.configs.items():
            op, schema = config["op"], config["schema"]
            order = schemas.setdefault(op, [])
            if schema not in order:
                order.append(schema)
            position = inputs.get((op, schema), 0)
            inputs[(op, schema)] = position + 1
            keys[identity] = format_key(op, order.index(schema), 0, position)
        return keys

    def _input(self, config: Dict[str, Any], main: str) -> Dict[str, Any]:
        ranks = config["ranks"]
        first = min(ranks)
        collective = config["schema"] == COLLECTIVE_SCHEMA
        base = CapturedWorkload.arg_spec_list(ranks[first]["entry"], main)
        per_rank: Dict[str, Dict[str, Any]] = {}
        total = OriginalTimes()
        comm = [0.0, 0]
        for rank, part in sorted(ranks.items()):
            entry = part["entry"]
            mine = CapturedWorkload.arg_spec_list(entry, main)
            if collective:  # this pairing's calls only (the entry may hold others)
                mine["count"] = len(part["calls"])
                mine["original_us"] = _call_times(part["calls"], entry)
            row: Dict[str, Any] = {"count": mine["count"]}
            if mine.get("original_us"):
                row["original_us"] = mine["original_us"]
            for key in ("args", "kwargs"):
                if mine.get(key) != base.get(key) and key in mine:
                    row[key] = mine[key]
            per_rank[str(rank)] = row
            times = row.get("original_us") or {}
            total.add((times.get("cpu"), times.get("device")), row["count"])
            if times.get("comm") is not None:
                comm[0] += times["comm"] * row["count"]
                comm[1] += row["count"]
        base["count"] = sum(row["count"] for row in per_rank.values())
        mean = total.mean()
        if comm[1]:
            mean = {**(mean or {"cpu": None, "device": None}),
                    "comm": round(comm[0] / comm[1], 3)}
        if mean is not None:
            base["original_us"] = mean
        else:
            base.pop("original_us", None)
        if self.world_size > 1:
            base["ranks"] = per_rank
        return base

    def spec(self) -> Dict[str, Any]:
        main = self.ranks[0].main_device()
        out: Dict[str, Any] = {}
        for identity, config in self.configs.items():
            op, schema = config["op"], config["schema"]
            entry = out.setdefault(op, {"build_data_generator": DEFAULT_DATA_GENERATOR,
                                        "input_data_generator": DEFAULT_DATA_GENERATOR,
                                        "config": []})
            block = next((c for c in entry["config"] if c.get("_schema") == schema), None)
            if block is None:
                block = {"_schema": schema, "input": []}
                if schema != COLLECTIVE_SCHEMA:
                    block["build"] = [{"args": [{"type": "str", "value": schema}]}]
                entry["config"].append(block)
            block["input"].append(self._input(config, main))
        for entry in out.values():
            for block in entry["config"]:
                del block["_schema"]
        out[PROCESS_GROUPS_KEY] = {"world_size": self.world_size, "groups": {
            name: {"ranks": list(group["ranks"]), "backend": group.get("backend", ""),
                   "desc": group.get("desc", "")} for name, group in self.groups.items()}}
        out[CAPTURE_KEY] = {**self.ranks[0].settings(),
                            "source": f"{self.world_size} ranks: "
                                      + ", ".join(self.source_names)[:900]}
        return out

    # -- the files -------------------------------------------------------------------------
    def step_body(self, spec_name: str, spec_sha256: Optional[str] = None) -> Dict[str, Any]:
        """The version-2 step file's content (``spec_sha256``: of the spec's bytes as
        written, so that a replay tells a step file whose spec changed since)."""
        keys = self.run_keys()
        ranks = []
        for rank, workload in enumerate(self.ranks):
            body = workload.step.to_json(
                lambda index, _, rank=rank: keys[self.call_identity[(rank, index)]],
                spec_name, workload.source, step_original(workload))
            body.pop("spec", None)
            ranks.append({"rank": rank, **body})
        body = {"spec": spec_name, "source": self.spec()[CAPTURE_KEY]["source"],
                "world_size": self.world_size, "ranks": ranks}
        if spec_sha256 is not None:
            body["spec_sha256"] = spec_sha256
        return body

    def report(self) -> Dict[str, Any]:
        ranks = []
        for rank, workload in enumerate(self.ranks):
            report = workload.report()
            report["rank"] = rank
            report["communication"] = workload.communication_us()
            ranks.append(report)
        return {"job": {"world_size": self.world_size, "groups": self.groups,
                        "configs": len(self.configs), "sources": self.source_names},
                "ranks": ranks}

    def write(self, path: Path, spec: Optional[Dict[str, Any]] = None) -> Tuple[Path, Path]:
        import hashlib

        from param_compute.files import write_new

        path = Path(path)
        text = (json.dumps(spec if spec is not None else self.spec(), indent=1)
                + "\n").encode("utf-8")
        write_new(path, text)
        report = report_path(path)
        write_new(report, json.dumps(self.report(), indent=1) + "\n")
        write_step_file(step_path(path), self.step_body(path.name,
                                                        hashlib.sha256(text).hexdigest()))
        return path, report

    def summary_lines(self) -> List[str]:
        collectives = sum(1 for c in self.configs.values() if c["schema"] == COLLECTIVE_SCHEMA)
        lines = [f"a job of {self.world_size} rank(s): {len(self.configs)} configs "
                 f"({collectives} collective), groups: "
                 + ", ".join(f"{printable(name, 40)} {group['ranks']}"
                             for name, group in sorted(self.groups.items()))]
        for rank, workload in enumerate(self.ranks):
            lines.append(f"rank {rank}: " + "\n  ".join(summary_lines(workload)))
            lines.append("  " + coverage_line(workload))
        return lines


def _call_times(calls: List[Dict[str, Any]], entry: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Mean original times of a rank's calls of one paired collective (its device time, which
    the step keeps per config only, from the config)."""
    cpu = [c["original_us"] for c in calls if c.get("original_us") is not None]
    comm = [c["comm_us"] for c in calls if c.get("comm_us") is not None]
    device = (entry["original"].mean() or {}).get("device")
    if not cpu and not comm and device is None:
        return None
    return {"cpu": round(sum(cpu) / len(cpu), 3) if cpu else None, "device": device,
            **({"comm": round(sum(comm) / len(comm), 3)} if comm else {})}


def coverage_line(workload: CapturedWorkload) -> str:
    """A rank's original time covered (compute and its collectives' own calls) and its
    communication time."""
    comm = workload.communication_us()
    parts = []
    if workload.kineto is not None:
        cover = workload.time_coverage()
        for side in ("cpu", "device"):
            total = cover["total_us"][side]
            if total:
                parts.append(f"{side} {100 * cover['captured_us'][side] / total:.1f}% of "
                             f"{total / 1e3:.3f} ms")
    text = ("original time covered: " + ", ".join(parts) + " (compute and its collectives' "
            "calls)") if parts else "original time: no Kineto trace joined"
    if comm["calls"] and comm["timed_calls"]:
        text += (f"; communication {comm['comm_us'] / 1e3:.3f} ms in {comm['calls']} "
                 f"collective call(s) ({comm['timed_calls']} timed from their issue to their "
                 "backend span's end)")
    elif comm["calls"]:
        text += (f"; {comm['calls']} collective call(s), their communication not timed (a "
                 "Kineto trace of the backend's thread times it: --from-et with --kineto)")
    return text

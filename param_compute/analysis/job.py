"""A job's results: every rank's results file read together into one ledger of the job.

A job under torchrun writes one results file per rank (``out.rank0of2.json``, ...: each
rank's records as they come, ``runtime.job``), each header saying its rank (``job``). The tools
take them together: ``param-compute totals``, ``report`` and ``history add`` given the ranks'
files. ``job_ledger`` puts each rank's ledger (``analysis.ledger``: its ops, its compute, its
communication and the part of it not hidden behind compute) beside the job's totals: the
job's ``in_step_ms`` is the median over the ranks of each rank's step (so are the real step,
the compute and the communication figures), and each collective's times per rank. Files that
are not the ranks of one job (two of one rank, another world size, a rank missing) are
refused with one line naming them. Torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from param_compute.results.stats import median

#: The ledger's totals the job takes the median of, over its ranks.
MEDIAN_KEYS = ("in_step_ms", "real_step_ms", "original_ms", "original_captured_ms",
               "isolated_ms", "in_step_ops_ms")


class JobFilesError(ValueError):
    """Results files that are not every rank of one job."""


def job_of(header: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A results header's ``job`` (rank, world size), or None for another run's file."""
    job = header.get("job") if isinstance(header, dict) else None
    if isinstance(job, dict) and isinstance(job.get("rank"), int) \
            and isinstance(job.get("world_size"), int):
        return job
    return None


def check_ranks(paths: Sequence[Path], headers: Sequence[Dict[str, Any]]) -> List[int]:
    """Each file's rank; ``JobFilesError`` unless they are every rank of one job, once each."""
    ranks, worlds = [], set()
    for path, header in zip(paths, headers):
        job = job_of(header)
        if job is None:
            raise JobFilesError(f"{path}: not a job's results file (its header has no job: "
                                "give the ranks' files of one job, out.rank*ofN.json)")
        ranks.append(job["rank"])
        worlds.add(job["world_size"])
    if len(worlds) > 1:
        raise JobFilesError(f"{', '.join(map(str, paths))}: ranks of jobs of different sizes "
                            f"({sorted(worlds)})")
    world = worlds.pop()
    seen = set()
    for path, rank in zip(paths, ranks):
        if rank in seen:
            raise JobFilesError(f"{path}: rank {rank} given twice")
        seen.add(rank)
    missing = [r for r in range(world) if r not in seen]
    if missing:
        raise JobFilesError(f"a job of {world} ranks: no file of rank(s) "
                            f"{', '.join(map(str, missing))} (give every rank's file)")
    return ranks


def _median_of(values: List[Optional[float]]) -> Optional[float]:
    known = [v for v in values if isinstance(v, (int, float))]
    return median(known) if known else None


def _block_median(ledgers: List[Dict[str, Any]], block: str) -> Optional[Dict[str, Any]]:
    parts = [ledger.get(block) for ledger in ledgers if isinstance(ledger.get(block), dict)]
    if not parts:
        return None
    keys = sorted({key for part in parts for key in part if key != "calls"})
    return {key: _median_of([part.get(key) for part in parts]) for key in keys}


def job_ledger(ledgers: Sequence[Dict[str, Any]], ranks: Sequence[int]) -> Dict[str, Any]:
    """The job's ledger: its totals (medians over the ranks) and each rank's ledger."""
    ordered = [ledger for _, ledger in sorted(zip(ranks, ledgers), key=lambda p: p[0])]
    for rank, ledger in zip(sorted(ranks), ordered):
        ledger["rank"] = rank
    out: Dict[str, Any] = {"world_size": len(ordered),
                           "how": "each total is the median over the ranks of that rank's "
                                  "(in_step_ms: each rank's step, timed as that rank saw it)"}
    for key in MEDIAN_KEYS:
        out[key] = _median_of([ledger.get(key) for ledger in ordered])
    out["per_rank_in_step_ms"] = [ledger.get("in_step_ms") for ledger in ordered]
    out["compute"] = _block_median(ordered, "compute")
    out["communication"] = _block_median(ordered, "communication")
    collectives: Dict[str, Dict[str, Any]] = {}
    for ledger in ordered:
        for row in ledger.get("ops") or []:
            if row.get("collective"):
                entry = collectives.setdefault(row["op"], {"op": row["op"], "ranks": []})
                entry["ranks"].append({"rank": ledger["rank"], "calls": row.get("calls"),
                                       "original_ms": row.get("original_ms"),
                                       "in_step_ms": row.get("in_step_ms"),
                                       "isolated_ms": row.get("isolated_ms")})
    out["collectives"] = list(collectives.values())
    out["ranks"] = ordered
    return out


def _ms(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def format_job(job: Dict[str, Any]) -> str:
    """The job's totals and each rank's compute and communication, as text."""
    lines = [f"job of {job['world_size']} ranks (each total: the median over the ranks):",
             f"  in-step replay {_ms(job['in_step_ms'])} ms per step (per rank: "
             + ", ".join(_ms(v) for v in job["per_rank_in_step_ms"]) + ")",
             f"  real step {_ms(job['real_step_ms'])} ms, original op time "
             f"{_ms(job['original_ms'])} ms, isolated replay {_ms(job['isolated_ms'])} ms"]
    header = (f"  {'rank':>4} {'in-step':>9} {'compute orig':>12} {'compute step':>12} "
              f"{'comm orig':>10} {'comm step':>10} {'exposed orig':>12} {'exposed step':>12}")
    lines += ["", "  ms per step: compute, communication, communication not hidden behind "
                  "compute", header, "  " + "-" * (len(header) - 2)]
    for ledger in job["ranks"]:
        compute = ledger.get("compute") or {}
        comm = ledger.get("communication") or {}
        lines.append(f"  {ledger['rank']:>4} {_ms(ledger.get('in_step_ms')):>9} "
                     f"{_ms(compute.get('original_ms')):>12} "
                     f"{_ms(compute.get('in_step_ms')):>12} "
                     f"{_ms(comm.get('original_ms')):>10} {_ms(comm.get('in_step_ms')):>10} "
                     f"{_ms(comm.get('original_exposed_ms')):>12} "
                     f"{_ms(comm.get('in_step_exposed_ms')):>12}")
    if job["collectives"]:
        lines += ["", "  collectives (ms per step, per rank: original / in-step / isolated):"]
        for entry in job["collectives"]:
            parts = [f"rank {r['rank']}: {_ms(r['original_ms'])} / {_ms(r['in_step_ms'])} / "
                     f"{_ms(r['isolated_ms'])}" for r in entry["ranks"]]
            lines.append(f"    {entry['op']}: " + "; ".join(parts))
    return "\n".join(lines)


def job_html(job: Dict[str, Any]) -> str:
    """The report's section for a job: its totals and each rank's compute and communication."""
    from html import escape

    head = ("rank", "in-step ms", "compute, original", "compute, in-step",
            "communication, original", "communication, in-step",
            "not hidden, original", "not hidden, in-step")
    rows = []
    for ledger in job["ranks"]:
        compute = ledger.get("compute") or {}
        comm = ledger.get("communication") or {}
        cells = (ledger["rank"], _ms(ledger.get("in_step_ms")), _ms(compute.get("original_ms")),
                 _ms(compute.get("in_step_ms")), _ms(comm.get("original_ms")),
                 _ms(comm.get("in_step_ms")), _ms(comm.get("original_exposed_ms")),
                 _ms(comm.get("in_step_exposed_ms")))
        rows.append("<tr>" + "".join(f"<td class=\"num\">{escape(str(c))}</td>"
                                     for c in cells) + "</tr>")
    collectives = "".join(
        f"<tr><td>{escape(entry['op'])}</td><td class=\"num\">{r['rank']}</td>"
        f"<td class=\"num\">{_ms(r['original_ms'])}</td>"
        f"<td class=\"num\">{_ms(r['in_step_ms'])}</td>"
        f"<td class=\"num\">{_ms(r['isolated_ms'])}</td></tr>"
        for entry in job["collectives"] for r in entry["ranks"])
    return (f"<h2>A job of {job['world_size']} ranks</h2>"
            f"<p>In-step replay {_ms(job['in_step_ms'])} ms per step: the median over the "
            "ranks of each rank's step (per rank: "
            + escape(", ".join(_ms(v) for v in job["per_rank_in_step_ms"])) + " ms); real "
            f"step {_ms(job['real_step_ms'])} ms.</p>"
            "<p class=\"note\">ms per step; communication not hidden behind compute: the "
            "time the rank waited on its collectives.</p><table><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>"
            + ("<table><thead><tr><th>collective</th><th>rank</th><th>original ms</th>"
               "<th>in-step ms</th><th>isolated ms</th></tr></thead><tbody>"
               + collectives + "</tbody></table>" if collectives else ""))

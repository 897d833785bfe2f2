"""What each config costs the engine beyond the op itself: time, retained memory, peak memory.

All three run the real command line in a child process (``--no-progress``, results in a temp
dir), so start-up, validation, expansion, data generation and the JSON Lines writer all count.

(a) 1,000 tiny configs (``torch.add`` on two [4] tensors, one config per RangeConfigIterator
    value of ``alpha``) with ``-w 1 -i 5`` must take <= 3 s wall in total, start-up included
    (PARAM: 89 s, because it calls ``gc.collect()`` per config). Median of REPEATS runs; a
    one-config run shows how much of it is start-up.
(b) 20,000 such configs must grow RSS by <= 50 MB: the peak RSS of the 20,000-config child minus
    that of the 1,000-config child (start-up and imports cancel out; what is left is what the
    19,000 extra configs kept).
(c) twenty configs each with a 256 MB input (``torch.add`` of [64M] float32 and a scalar) in a
    row must peak below twice the peak of one such config alone: the engine must release each
    config's tensors before making the next one's.

Peaks are ``ru_maxrss`` of exactly that child (``wait4``). Every run waits for a core free of
other load first; the child's CPU time (user + sys) is shown beside its wall time, since on a
shared machine wall time also counts waiting for a core.

(d) 200 tiny configs with no protocol flag (the default, ``auto``: by time and noise) must
    average at most 60 ms of wall time a config (the run's own cost beyond one config's), and
    every config at least 5 values.

    python bench/per_config.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from _common import (median, op_spec, print_table, run_cli, tensor, verdict,
                     wait_quiet, write_spec)

REPEATS = 3
TINY_WALL_S, TINY_COUNT = 3.0, 1000
GROWTH_MB, GROWTH_COUNT = 50.0, 20000
BIG_COUNT, BIG_ELEMENTS = 20, 64 * 1024 * 1024  # 256 MB of float32
#: The default protocol's budget: at most this much wall time per tiny config, on average.
AUTO_COUNT, AUTO_MS = 200, 60.0


def _ranged_int(count: int) -> Dict[str, Any]:
    return {"type": "int", "value": [1, count], "__range__": ["value"]}


def tiny_spec(count: int) -> dict:
    """``count`` configs of torch.add on [4] tensors (default requires_grad, as PARAM specs)."""
    return op_spec("torch.add", [{"args": [tensor([4], None), tensor([4], None)],
                                  "kwargs": {"alpha": _ranged_int(count)}}],
                   iterator="RangeConfigIterator")


def big_spec(count: int) -> dict:
    """``count`` configs of torch.add(x, k), x a fresh 256 MB float32 tensor per config."""
    return op_spec("torch.add", [{"args": [tensor([BIG_ELEMENTS], None), _ranged_int(count)]}],
                   iterator="RangeConfigIterator")


def cli(tmp: Path, name: str, spec: dict, *options: str) -> Dict[str, float]:
    wait_quiet()
    return run_cli(write_spec(tmp, f"{name}.json", spec), tmp / f"{name}.jsonl", *options)


def main() -> int:
    rows: List[list] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="param_compute_bench_") as directory:
        tmp = Path(directory)

        # (a) wall time of 1,000 tiny configs, start-up included.
        tiny = "-w", "1", "-i", "5"
        ones = [cli(tmp, "one", tiny_spec(1), *tiny) for _ in range(REPEATS)]
        runs = [cli(tmp, "tiny1k", tiny_spec(TINY_COUNT), *tiny) for _ in range(REPEATS)]
        wall, cpu = (median(r[key] for r in runs) for key in ("wall_s", "cpu_s"))
        one_wall, one_cpu = (median(r[key] for r in ones) for key in ("wall_s", "cpu_s"))
        passed = wall <= TINY_WALL_S
        ok &= passed
        rows.append([f"(a) {TINY_COUNT} tiny configs, -w 1 -i 5: wall",
                     f"{wall:.2f} s wall, {cpu:.2f} s CPU (1 config: {one_wall:.2f} s wall, "
                     f"{one_cpu:.2f} s CPU; {(cpu - one_cpu) / (TINY_COUNT - 1) * 1e3:.2f} ms "
                     "CPU per config)", f"≤ {TINY_WALL_S:.0f} s", "89 s", verdict(passed)])

        # (b) memory kept by 19,000 more configs.
        small_peak = median(r["maxrss_mb"] for r in runs)
        large = cli(tmp, "tiny20k", tiny_spec(GROWTH_COUNT), *tiny)
        growth = large["maxrss_mb"] - small_peak
        passed = growth <= GROWTH_MB
        ok &= passed
        rows.append([f"(b) {GROWTH_COUNT} tiny configs: peak RSS growth",
                     f"{growth:+.1f} MB (peak {large['maxrss_mb']:.0f} MB vs {small_peak:.0f} MB "
                     f"with {TINY_COUNT}; {large['wall_s']:.1f} s wall)",
                     f"≤ {GROWTH_MB:.0f} MB", "", verdict(passed)])

        # (c) twenty 256 MB configs in a row vs one alone.
        big = "-w", "1", "-i", "2"
        alone = cli(tmp, "big1", big_spec(1), *big)["maxrss_mb"]
        row = cli(tmp, "big20", big_spec(BIG_COUNT), *big)["maxrss_mb"]
        passed = row < 2 * alone
        ok &= passed
        rows.append([f"(c) {BIG_COUNT} configs with a 256 MB input: peak RSS",
                     f"{row:.0f} MB (one config alone: {alone:.0f} MB; "
                     f"{row - alone:+.0f} MB)", f"< {2 * alone:.0f} MB (2 × alone)", "",
                     verdict(passed)])

        # (d) the default protocol (no -w/-i): by time and noise, at what cost per config.
        auto_runs = [cli(tmp, "auto", tiny_spec(AUTO_COUNT)) for _ in range(REPEATS)]
        auto_one = [cli(tmp, "auto1", tiny_spec(1)) for _ in range(REPEATS)]
        per_config = (median(r["wall_s"] for r in auto_runs)
                      - median(r["wall_s"] for r in auto_one)) / (AUTO_COUNT - 1) * 1e3
        records = [json.loads(line) for line in (tmp / "auto.jsonl").read_text().splitlines()]
        stats = [r["stats"]["forward"] for r in records if r.get("kind") == "run"]
        fewest = min(s["n"] for s in stats)
        reasons = {reason: sum(1 for s in stats if s.get("stop_reason") == reason)
                   for reason in ("noise", "max_time", "max_iteration")}
        passed = per_config <= AUTO_MS and fewest >= 5
        ok &= passed
        rows.append([f"(d) {AUTO_COUNT} tiny configs, the default protocol: per config",
                     f"{per_config:.1f} ms wall a config; n >= {fewest}; stopped by noise "
                     f"{reasons['noise']}, by the cap {reasons['max_time']}",
                     f"≤ {AUTO_MS:.0f} ms, n ≥ 5", "", verdict(passed)])

    print_table("Per-config cost, command line in a child process",
                ["check", "measured", "target", "PARAM", "result"], rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""``python -m param_compute.ab``: A/A calls no difference, A/B finds a real one.

Targets (issue 23):

* **A/A**: the same flags on both sides, 20 configs (``add``, ``mul``, ``relu``, ``mm``,
  ``softmax`` at four sizes each): ``compare DIR/a.json DIR/b.json`` calls at most 1 of them
  different (faster or slower), i.e. no significant difference in >= 95% of configs.
* **A/B**: ``--a "--num-threads 1" --b "--num-threads 2"`` on a 512² ``mm``: called different
  (B faster on a machine with two free cores).

Both run through the real command (``python -m param_compute.ab``, fresh processes, ABBA
rounds); the verdicts are read back from the written files with ``compare_files``, the same
call ``python -m param_compute.compare`` makes. Prints a table of both checks.

    python bench/ab_check.py                       # 4 rounds, -i 40 (about a minute)
    python bench/ab_check.py --rounds 4 --iterations 100

Exit status: 0 both targets met, 1 a target missed, 2 ab failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from param_compute.analysis.comparison import compare_files  # noqa: E402
from param_compute.results.file import read_results  # noqa: E402

SIZES = [[64, 64], [128, 128], [256, 256], [128, 512]]


def _tensor(shape, **extra):
    return {"type": "tensor", "dtype": "float", "shape": shape, **extra}


def _op(args_of):
    return {"input_data_generator": "PyTorch:DefaultDataGenerator",
            "config": [{"input": [{"args": args_of(shape)} for shape in SIZES]}]}


def aa_spec():
    """20 configs: 5 operators x 4 sizes."""
    return {
        "torch.add": _op(lambda s: [_tensor(s), _tensor(s)]),
        "torch.mul": _op(lambda s: [_tensor(s), _tensor(s)]),
        "torch.relu": _op(lambda s: [_tensor(s)]),
        "torch.mm": _op(lambda s: [_tensor(s), _tensor([s[1], s[0]])]),
        "torch.nn.functional.softmax": _op(lambda s: [_tensor(s), {"type": "int", "value": -1}]),
    }


MM_512 = {"torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                       "config": [{"input": [{"args": [_tensor([512, 512]),
                                                       _tensor([512, 512])]}]}]}}


def run_ab(spec, folder: Path, a: str, b: str, rounds: int):
    path = folder / "spec.json"
    path.write_text(json.dumps(spec))
    out = folder / "ab"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "param_compute.ab", "-c", str(path),
                           f"--a={a}", f"--b={b}", "-o", str(out), "--rounds", str(rounds)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        sys.exit(2)
    report = compare_files(out / "a.json", out / "b.json", across_settings=True)
    medians = {}
    for side in ("a", "b"):
        for record in read_results(out / f"{side}.json").records:
            stats = (record.get("stats") or {}).get("forward") or {}
            medians.setdefault((record["op_name"], record["id"]), {})[side] = [
                round(m * 1e3, 1) for m in stats.get("repetition_medians", [])]
    return report, seconds, medians


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iterations", type=int, default=40)
    args = p.parse_args()
    common = f"-w 5 -i {args.iterations} --no-throughput"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "aa").mkdir()
        (folder / "ab").mkdir()
        aa, aa_s, aa_medians = run_ab(aa_spec(), folder / "aa", common, common, args.rounds)
        ab, ab_s, ab_medians = run_ab(MM_512, folder / "ab", f"{common} --num-threads 1",
                          f"{common} --num-threads 2", args.rounds)
    different = [r for r in aa.rows if r.result.verdict != "same"]
    print(f"{'check':<34} {'configs':>7} {'different':>9} {'target':>10} {'time':>7}  result")
    aa_ok = len(aa.rows) == 20 and len(different) <= 1
    print(f"{'A/A (same flags), 20 configs':<34} {len(aa.rows):>7} {len(different):>9} "
          f"{'<= 1':>10} {aa_s:>6.0f}s  {'ok' if aa_ok else 'MISS'}")
    row = ab.rows[0] if ab.rows else None
    ab_ok = row is not None and row.result.verdict != "same"
    verdict = f"{row.result.verdict} {row.result.speedup:.2f}x" if row else "no row"
    print(f"{'A/B --num-threads 1 vs 2, mm 512²':<34} {len(ab.rows):>7} "
          f"{int(ab_ok):>9} {'1':>10} {ab_s:>6.0f}s  {'ok' if ab_ok else 'MISS'} ({verdict})")
    for r in different:
        print(f"  A/A called {r.op} {r.id} {r.result.verdict}: {r.result.speedup:.3f}x, "
              f"p {r.result.p_value:.3g}; process medians (µs) {aa_medians[(r.op, r.id)]}")
    for run, sides in ab_medians.items():
        print(f"  A/B process medians (µs): {sides}")
    return 0 if aa_ok and ab_ok else 1


if __name__ == "__main__":
    sys.exit(main())

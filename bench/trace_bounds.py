"""What reading a trace as untrusted input costs, in time and in memory (issues 20 and 31).

    python bench/trace_bounds.py [--traces ../shared/traces] [--copies 10] [--rounds 3]
                                 [--rss-mb 300] [--base OLD_CHECKOUT] [--skip-rss]

1. A large execution trace (the ResNet trace of ``--traces`` repeated ``--copies`` times with
   fresh ids; without it, generated nodes of the same form): medians over rounds of the plain
   ``json.loads`` (the garbage collector on, as any script would call it), of
   ``trace_io.parse_json`` (decode, the parse's memory told, the parse, depth and duplicate
   keys) and of ``trace_check.check_execution_trace`` (the structural check of every node).
   Target: the checks add at most half of the plain parse's time.
2. A gzip bomb (256 MiB of JSON whitespace in a ~256 KiB file) read with a 16 MiB cap: the read
   must stop at the cap. Target: peak traced memory at most twice the cap plus one read block.
3. Peak memory of ``read_json`` (the peak resident set during the read less the resident set
   when it began: the kernel's mark reset, ``measure.host_memory.RssWindow``) on a generated
   execution trace of about ``--rss-mb`` MB, plain and gzipped, in a fresh process each; with
   ``--base DIR`` the same with the ``param_compute`` package of DIR (an older checkout)
   beside it: before and after. Target: no more than before.
4. The same trace read under an address-space limit (``ulimit -v``) that leaves it about 1.5 GiB:
   more than the text, less than its parse. Target: refused with a message saying how much the
   parse would take, never a ``MemoryError``, at a peak of about the text's size.

Prints tables; exits 1 on a missed target.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from pathlib import Path

from param_compute.capture.trace import files as trace_io
from param_compute.capture.accounting import TraceError
from param_compute.capture.trace.check import check_execution_trace

REPO = Path(__file__).resolve().parents[1]
#: The address space left to the read in row 4 (beyond what the process maps before it).
CAPPED_ROOM = 3 * 2**29


def _generated_nodes(count: int):
    for i in range(1, count + 1):
        yield {"id": i, "name": "aten::add", "ctrl_deps": max(0, i - 1) // 8,
               "inputs": {"values": [[i, i, 0, 64, 4, "cpu"], [i + 1, i + 1, 0, 64, 4, "cpu"], 1],
                          "shapes": [[8, 8], [8, 8], []],
                          "types": ["Tensor(float)", "Tensor(float)", "Int"]},
               "outputs": {"values": [[i + 2, i + 2, 0, 64, 4, "cpu"]], "shapes": [[8, 8]],
                           "types": ["Tensor(float)"]},
               "attrs": [{"name": "rf_id", "type": "uint64", "value": i},
                         {"name": "op_schema", "type": "string",
                          "value": "aten::add.Tensor(Tensor self, Tensor other, *, Scalar "
                                   "alpha=1) -> Tensor"}]}


def large_trace(traces: Path, copies: int) -> bytes:
    source = traces / "resnet_et.json.gz" if traces else None
    if source is None or not source.exists():
        return json.dumps({"schema": "1.0.3", "nodes": list(_generated_nodes(150_000 * copies
                                                                             // 10))}).encode()
    base = json.loads(gzip.open(source).read())
    nodes = []
    for copy in range(copies):
        shift = copy * 10**7
        for node in base["nodes"]:
            fresh = dict(node, id=node["id"] + shift)
            if isinstance(fresh.get("ctrl_deps"), int) and fresh["ctrl_deps"]:
                fresh["ctrl_deps"] += shift
            nodes.append(fresh)
    return json.dumps({"schema": base.get("schema"), "nodes": nodes}).encode()


def write_generated(path: Path, megabytes: int) -> int:
    """A generated execution trace of about ``megabytes`` MB at ``path``, written node by
    node (never whole in this process); its node count."""
    node = json.dumps(next(_generated_nodes(1)))
    count = megabytes * 10**6 // (len(node) + 2)
    with path.open("w") as out:
        out.write('{"schema": "1.0.3", "nodes": [')
        for index, item in enumerate(_generated_nodes(count)):
            out.write((", " if index else "") + json.dumps(item))
        out.write("]}")
    return count


def time_rows(args):
    text = large_trace(args.traces, args.copies)
    plain, checked, structure = [], [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        json.loads(text)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        value = trace_io.parse_json(bytearray(text), "large trace")
        checked.append(time.perf_counter() - start)
        start = time.perf_counter()
        check_execution_trace(value, "large trace")
        structure.append(time.perf_counter() - start)
        del value
    parse_s, read_s, check_s = (statistics.median(x) for x in (plain, checked, structure))
    added = (read_s - parse_s + check_s) / parse_s
    return [("large trace", f"{len(text) / 2**20:.0f} MiB",
             f"json.loads {parse_s:.2f} s; parse_json {read_s:.2f} s; check {check_s:.2f} s",
             f"{100 * added:+.0f}% of the parse", "<= +50%", added <= 0.5)]


def bomb_row():
    cap = 16 * 2**20
    with tempfile.TemporaryDirectory() as folder:
        bomb = Path(folder) / "bomb.json.gz"
        with gzip.open(bomb, "wb", compresslevel=9) as stream:
            stream.write(b'{"nodes": [')
            for _ in range(256):
                stream.write(b" " * 2**20)
            stream.write(b"]}")
        tracemalloc.start()
        start = time.perf_counter()
        try:
            trace_io.read_json(bomb, max_bytes=cap)
            stopped = False
        except TraceError:
            stopped = True
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        limit = 2 * cap + 2**20
        return ("gzip bomb, 256 MiB in", f"{bomb.stat().st_size / 2**10:.0f} KiB",
                f"refused at the 16 MiB cap in {elapsed:.2f} s" if stopped else "read whole",
                f"peak {peak / 2**20:.1f} MiB", f"<= {limit / 2**20:.0f} MiB",
                stopped and peak <= limit)


#: Run in a fresh process: read the trace (optionally under an address-space limit), print
#: what happened and the resident-set peak of the read (the peak before it subtracted).
CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import param_compute
    from param_compute.capture.trace.files import read_json
    from param_compute.capture.accounting import TraceError
    from param_compute.measure.host_memory import RssWindow
    path, room = sys.argv[1], int(sys.argv[2])
    if room:
        with open("/proc/self/status") as status:
            mapped = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (mapped + room, resource.RLIM_INFINITY))
    window = RssWindow()  # the kernel's peak-RSS mark reset: the read's own peak
    window.start()
    start = time.perf_counter()
    try:
        nodes = len(read_json(path)["nodes"])
        said = f"read, {nodes} nodes"
    except TraceError as exc:
        said = "refused: " + str(exc)
    except MemoryError:
        said = "MemoryError"
    elapsed = time.perf_counter() - start
    print(json.dumps({"said": said, "seconds": elapsed, "peak_mb": window.peak_bytes() / 2**20,
                      "package": param_compute.__file__}))
""")


def child_read(package_root: Path, trace: Path, room: int = 0):
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(trace), str(room)], env=env,
                          capture_output=True, text=True, timeout=1800,
                          cwd=trace.parent)  # not the checkout: PYTHONPATH picks the package
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"said": f"crashed: {tail}", "seconds": 0.0, "peak_mb": 0.0}
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_rows(args):
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / "big_et.json"
        nodes = write_generated(plain, args.rss_mb)
        packed = Path(folder) / "big_et.json.gz"
        with plain.open("rb") as source, gzip.open(packed, "wb", compresslevel=1) as out:
            while True:
                block = source.read(2**24)
                if not block:
                    break
                out.write(block)
        size_mb = plain.stat().st_size / 2**20
        trees = [("this tree", REPO)] + ([("before (--base)", args.base)] if args.base else [])
        for label, trace in (("plain", plain), ("gzipped", packed)):
            peaks = {}
            for tree, root in trees:
                got = child_read(root, trace)
                peaks[tree] = got["peak_mb"]
                rows.append((f"{size_mb:.0f} MiB trace ({nodes:,} nodes), {label}", tree,
                             got["said"][:60], f"{got['seconds']:.1f} s",
                             f"{got['peak_mb']:.0f} MB", ""))
            if args.base:
                ok = peaks["this tree"] <= peaks["before (--base)"] * 1.02
                rows[-2] = rows[-2][:5] + (f"<= before: {'yes' if ok else 'MISS'}",)
                failures.append(not ok)
        for tree, root in trees:
            got = child_read(root, plain, CAPPED_ROOM)
            refused = got["said"].startswith("refused") and "would take" in got["said"]
            verdict = ""
            if tree == "this tree":
                verdict = "refused, said: yes" if refused else "MISS"
                failures.append(not refused)
            rows.append((f"same, ulimit -v: {CAPPED_ROOM / 2**30:.1f} GiB of room", tree,
                         got["said"][:200], f"{got['seconds']:.1f} s",
                         f"{got['peak_mb']:.0f} MB", verdict))
    return rows, not any(failures)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", type=Path, default=None)
    p.add_argument("--copies", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rss-mb", type=int, default=300,
                   help="size of the generated trace read for the memory rows")
    p.add_argument("--base", type=Path, default=None,
                   help="a folder holding an older param_compute package (before)")
    p.add_argument("--skip-rss", action="store_true", help="only the timing and bomb rows")
    args = p.parse_args(argv)
    rows = time_rows(args) + [bomb_row()]
    print("| input | size | what happened | figure | target | ok |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row[:-1]) + f" | {'yes' if row[-1] else 'MISS'} |")
    ok = all(row[-1] for row in rows)
    if not args.skip_rss:
        memory, memory_ok = memory_rows(args)
        print()
        print("| input | code | what happened | time | peak RSS of the read | target |")
        print("| --- | --- | --- | --- | --- | --- |")
        for row in memory:
            print("| " + " | ".join(str(c) for c in row) + " |")
        ok = ok and memory_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""What reading a trace as untrusted input costs, and what a gzip bomb costs (issue 20).

    python bench/trace_bounds.py [--traces ../shared/traces] [--copies 10] [--rounds 3]

1. A large execution trace (the ResNet trace of ``--traces`` repeated ``--copies`` times with
   fresh ids; without it, generated nodes of the same form): medians over rounds of the plain
   ``json.loads``, of ``trace_io.parse_json`` (decode, parse and the depth check) and of
   ``trace_check.check_execution_trace`` (the structural check of every node). Target: the
   depth and structural checks together add at most half of the plain parse's time.
2. A gzip bomb (256 MiB of JSON whitespace in a ~256 KiB file) read with a 16 MiB cap: the read
   must stop at the cap. Target: peak traced memory at most twice the cap plus one read chunk.

Prints a table; exits 1 on a missed target.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from param_compute.capture.trace import files as trace_io
from param_compute.capture.accounting import TraceError
from param_compute.capture.trace.check import check_execution_trace


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", type=Path, default=None)
    p.add_argument("--copies", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
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
    rows = [("large trace", f"{len(text) / 2**20:.0f} MiB",
             f"json.loads {parse_s:.2f} s; parse_json {read_s:.2f} s; check {check_s:.2f} s",
             f"+{100 * added:.0f}% of the parse", "<= +50%", added <= 0.5)]

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
        limit = 2 * cap + trace_io._CHUNK
        rows.append(("gzip bomb, 256 MiB in", f"{bomb.stat().st_size / 2**10:.0f} KiB",
                     f"refused at the 16 MiB cap in {elapsed:.2f} s" if stopped else "read whole",
                     f"peak {peak / 2**20:.1f} MiB", f"<= {limit / 2**20:.0f} MiB",
                     stopped and peak <= limit))
    print("| input | size | what happened | figure | target | ok |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row[:-1]) + f" | {'yes' if row[-1] else 'MISS'} |")
    return 0 if all(row[-1] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

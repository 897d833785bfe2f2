"""Reports that lead with what matters: the protocol used in the header, a captured workload's
step and where its time goes first, sweeps only over ranged dims (categories as grouped bars,
legends by config), a roofline with per-dtype ceilings and a legend, bounded memory over a big
file, a compare page with speedup bars; every value from a file escaped."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from conftest import run_cli
from param_compute.analysis import report as report_module
from param_compute.results.file import stream_results
from param_compute.analysis.report import build_report, protocol_text
from param_compute.analysis.sweeps import find_sweeps

pytest.importorskip("matplotlib")

HOSTILE = "<img src=x onerror=alert(1)>"


def tensor(*shape, dtype="float"):
    return {"type": "tensor", "dtype": dtype, "shape": list(shape)}


def record(op: str, run_id: str, args: List[Dict[str, Any]], median: float,
           count: Optional[int] = None, original_us: Optional[float] = None,
           throughput: Optional[Dict[str, Any]] = None, kwargs=None,
           spread: float = 0.02) -> Dict[str, Any]:
    """A run record as run_benchmark writes it: 16 measured times around ``median`` (ms)."""
    times = [median * (1 + spread * (k - 8) / 8) for k in range(16)]
    ordered = sorted(times)
    out = {"op_name": op, "id": run_id, "status": "ok",
           "config": {"build": None, "input": {"args": args, **({"kwargs": kwargs}
                                                                if kwargs else {})}},
           "metric": {"forward": {"measure.time": times}},
           "stats": {"forward": {"n": 16, "median": median, "p10": ordered[1],
                                 "p90": ordered[-2]}}}
    if count is not None:
        out["count"] = count
    if original_us is not None:
        out["original_us"] = {"cpu": original_us, "device": None}
    if throughput is not None:
        out["throughput"] = {"forward": throughput}
    return out


def write_results(path: Path, records, options: Optional[Dict[str, Any]] = None) -> Path:
    """A results file: header (``options`` over a time-based protocol), records, finish."""
    run_options = {"device": "cpu", "warmup": 1, "iteration": 1, "warmup_time": 0.2,
                   "min_time": 0.5, "max_iteration": 100000, "exec_mode": "discrete",
                   "num_threads": 1, **(options or {})}
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"run_options": run_options,
                              "sys_info": {"hostname": "test", "device": "cpu"},
                              "start_time": "2026-11-26T00:00:00"}) + "\n")
        n = 0
        for item in records:
            out.write(json.dumps(item) + "\n")
            n += 1
        out.write(json.dumps({"finish_time": "2026-11-26T00:01:00", "runs_ok": n,
                              "runs_failed": 0, "runs_dry": 0}) + "\n")
    return path


def sweep_records():
    """An mm over a ranged M (two lines by N), a softmax over dtype x dim (categories), a
    list of four unrelated shapes (no sweep), with utilization for the roofline."""
    out = []
    for i, (m, n) in enumerate((m, n) for n in (64, 128) for m in (32, 64, 128, 256)):
        flops = 2 * m * 64 * n
        median = flops / 1e8
        out.append(record("torch.mm", f"0|0|0_{i}", [tensor(m, 64), tensor(64, n)], median,
                          throughput=_rates(flops, 4 * (m * 64 + 64 * n + m * n), median,
                                            1e11)))
    for i, (dtype, dim) in enumerate((d, k) for d in ("float", "bfloat16") for k in (0, 1)):
        median = 0.05 + 0.01 * i
        out.append(record("torch.softmax", f"0|0|0_{i}", [tensor(64, 1024, dtype=dtype)],
                          median, kwargs={"dim": {"type": "int", "value": dim}},
                          throughput=_rates(5 * 64 * 1024, 2 * 2 * 64 * 1024, median,
                                            1e11 if dtype == "float" else 4e11)))
    for i, shape in enumerate(((7, 300), (64, 64), (512, 8), (100, 1000))):
        out.append(record("torch.relu", f"0|0|0_{i}", [tensor(*shape)], 0.01 * (i + 1)))
    out.append(record("torch.relu", f"0|0|1_0", [tensor(3)], 0.001))
    out[-1]["op_name"] = HOSTILE
    return out


def _rates(flops, nbytes, median_ms, peak_flops, peak_bw=2e10):
    seconds = median_ms / 1e3
    out = {"tflops_per_s": flops / seconds / 1e12, "gb_per_s": nbytes / seconds / 1e9,
           "bw_util": nbytes / seconds / peak_bw, "intensity": flops / nbytes}
    if flops:
        out["flops_util"] = flops / seconds / peak_flops
    compute = flops / nbytes * peak_bw >= peak_flops
    out["bound"] = "compute" if compute else "memory"
    out["util"] = out.get("flops_util") if compute else out["bw_util"]
    return out


def captured_records():
    """A captured step: mm configs with counts and original times, a relu, an add."""
    shapes = [((64, 4096), (4096, 512), 8, 0.40, 420.0), ((64, 512), (512, 4096), 8, 0.38, 400.0),
              ((64, 4096), (4096, 4096), 2, 3.1, 3300.0), ((4096, 64), (64, 512), 1, 0.2, 190.0)]
    out = [record("aten::mm", f"0|0|{i}", [tensor(*a, dtype="bfloat16"),
                                          tensor(*b, dtype="bfloat16")], median, count=count,
                  original_us=orig)
           for i, (a, b, count, median, orig) in enumerate(shapes)]
    out.append(record("aten::relu", "0|0|0", [tensor(64, 4096)], 0.02, count=8,
                      original_us=24.0))
    out.append(record("aten::add_", "0|0|0", [tensor(64, 4096), tensor(64, 4096)], 0.03,
                      count=16, original_us=70.0))
    return out


def _report(tmp_path: Path, records, name: str = "r", **options) -> str:
    path = write_results(tmp_path / f"{name}.json", records, options)
    text, _ = build_report(stream_results(path))
    return text


def test_the_header_says_the_protocol_that_was_used(tmp_path):
    text = _report(tmp_path, sweep_records())
    protocol = re.search(r"<dt>protocol</dt><dd>([^<]*)</dd>", text).group(1)
    assert "0.2 s" in protocol and "0.5 s" in protocol and "16 calls measured per pass" \
        in protocol
    assert "warm-up 1," not in text and "measured 1 " not in text
    # stopping on noise, another timer, dropped samples: said too
    said = protocol_text({"warmup": 1, "iteration": 1, "min_time": 0.5, "max_noise": 2,
                          "max_time": 10, "timer": "cpu", "discard_disturbed": True},
                         (40, 900))
    assert "within ±2% (at most 10 s)" in said and "cpu timer" in said \
        and "disturbed samples dropped" in said and "40–900 calls" in said
    # a count-based run says its counts
    assert protocol_text({"warmup": 5, "iteration": 30, "exec_mode": "discrete"}, (30, 30)) \
        == "warm-up 5 call(s); measured 30 call(s); 30 calls measured per pass; discrete"


def test_sweeps_only_where_a_dimension_was_ranged():
    records = sweep_records()
    [mm] = find_sweeps("torch.mm", [r for r in records if r["op_name"] == "torch.mm"])
    assert mm.x_label == "arg0.shape[0]" and not mm.categories
    assert sorted(line.label for line in mm.lines) == ["arg1.shape[1]=128",
                                                       "arg1.shape[1]=64"]
    assert all(len(line.points) == 4 for line in mm.lines)
    # four unrelated shapes: a list, not a sweep
    assert find_sweeps("torch.relu", [r for r in records if r["op_name"] == "torch.relu"]) \
        == []
    # categories (a dtype, a two-valued dim) as grouped bars
    [bars] = find_sweeps("torch.softmax", [r for r in records
                                           if r["op_name"] == "torch.softmax"])
    assert bars.categories == ["float32", "bfloat16"] and bars.x_label == "arg0.dtype"
    assert sorted(line.label for line in bars.lines) == ["dim=0", "dim=1"]
    assert [p.x for p in bars.lines[0].points] == [0.0, 1.0]


def test_legends_name_configs_not_ids():
    # two variants alike in everything but their shapes' fixed parts: told apart by those
    records = ([record("op", f"0|0|0_{i}", [tensor(n, 8)], 1.0 + i) for i, n in
                enumerate((1, 2, 4))]
               + [record("op", f"0|0|1_{i}", [tensor(n, 16)], 1.0 + i) for i, n in
                  enumerate((1, 2, 4))])
    [sweep] = find_sweeps("op", records)
    labels = [line.label for line in sweep.lines]
    assert labels == ["arg0.shape[1]=8", "arg0.shape[1]=16"]
    assert not any("|" in label or "*" in label for label in labels)


def test_a_captured_workload_leads_with_its_step_and_where_the_time_goes(tmp_path):
    text = _report(tmp_path, captured_records())
    heads = re.findall(r"<h[23]>([^<]*)</h[23]>", text)
    assert heads == ["Step totals", "Where the time goes", "Largest configs",
                     "Configs, largest share of the step first"]  # no sweeps of a capture
    where = text[text.index("Where the time goes"):text.index("Largest configs")]
    ops = re.findall(r"<tr><td>([^<]*)</td><td class=\"share\">", where)
    assert ops == ["aten::mm", "aten::add_", "aten::relu"]  # by share of the replayed step
    assert "original ms" in where and "replayed / original" in where
    replayed_mm = 8 * 0.40 + 8 * 0.38 + 2 * 3.1 + 0.2
    assert f"{replayed_mm:.3f}" in where and f"{(420 * 8 + 400 * 8 + 6600 + 190) / 1e3:.3f}" \
        in where
    largest = text[text.index("Largest configs"):text.index("Configs, largest share")]
    assert "64×4096·4096×4096 bf16" in largest  # the largest config, by its shapes
    table = text[text.index("Configs, largest share"):]
    first = re.search(r"<td class=\"config\">([^<]*)</td>", table).group(1)
    assert first == "64×4096·4096×4096 bf16"  # 2 x 3.1 ms: the largest share first


def test_roofline_has_a_ceiling_per_dtype_and_a_legend(tmp_path):
    text = _report(tmp_path, sweep_records())
    roof = text[text.index("<h2>Roofline</h2>"):text.index("</svg>", text.index("Roofline"))]
    assert "legend" in roof and "memory roof 20 GB/s" in roof
    assert "f32 ceiling 0.1 TFLOP/s" in roof and "bf16 ceiling 0.4 TFLOP/s" in roof
    assert "compute-bound run" in roof and "memory-bound run" in roof
    assert "<title>torch.mm|0|0|0_0 forward 32×64·64×64 f32, " in roof  # titled by config


def test_every_value_from_the_file_is_escaped(tmp_path):
    text = _report(tmp_path, sweep_records())
    assert HOSTILE not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<script" not in text and not re.search(r"https?://", text)


def test_report_memory_is_bounded_by_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.setattr(report_module, "TABLE_ROWS", 50)
    monkeypatch.setattr(report_module, "ROOF_POINTS", 50)
    monkeypatch.setattr(report_module, "SWEEP_RUNS", 20)
    monkeypatch.setattr(report_module, "SWEEP_RUNS_ALL", 80)
    monkeypatch.setattr(report_module, "plot_sweep", lambda sweep: b"png")  # not measured here

    def records(n):
        for i in range(n):
            yield record(f"op{i % 4}", f"0|0|0_{i}", [tensor(8, 8 + i)], 0.01 + i * 1e-6)

    def peak(work) -> int:
        tracemalloc.start()
        try:
            work()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    extra = []  # beyond what reading the file takes (the reader keeps a key per run)
    for n in (800, 8000):
        path = write_results(tmp_path / f"big{n}.json", records(n))
        reading = peak(lambda: sum(1 for _ in stream_results(path)))
        made = {}
        extra.append(peak(lambda: made.update(zip(("text", "sweeps"), build_report(
            stream_results(path))))) - reading)
        text = made["text"]
        assert text.count("<tr><td>op") == 50
        assert f"50 runs shown; {n - 50} more are in the results file" in text
        assert len(made["sweeps"]) == 4
    assert extra[1] < 1.5 * extra[0] + 100_000, extra  # ten times the runs, same memory


def test_compare_html_has_speedup_bars_intervals_and_configs(tmp_path):
    base = write_results(tmp_path / "base.json",
                         [record("torch.mm", "0|0|0", [tensor(64, 64), tensor(64, 64)], 1.0),
                          record(HOSTILE, "0|0|0", [tensor(8)], 0.5)])
    new = write_results(tmp_path / "new.json",
                        [record("torch.mm", "0|0|0", [tensor(64, 64), tensor(64, 64)], 0.5),
                         record(HOSTILE, "0|0|0", [tensor(8)], 0.5)])
    out = tmp_path / "cmp.html"
    result = run_cli(base, new, "--html", out, module="param_compute.compare")
    assert result.returncode == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert HOSTILE not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    row = re.search(r"<tr class=\"faster\">.*?</tr>", text).group(0)
    assert "torch.mm" in row and "64×64·64×64 f32" in row and "2.000×" in row
    assert re.search(r"<svg[^>]*aria-label=\"speedup 2.000×\">.*<rect", row)
    assert re.search(r"\d\.\d{3}–\d\.\d{3}×", row)  # the interval
    assert "<tr class=\"same\">" in text
    assert "0.5× ← slower · 1× · faster → 2×" in text or "0.25× ← slower" in text

"""``python -m param_compute.analysis.report``: sweep plots and the table, one self-contained HTML file."""

from __future__ import annotations

import base64
import itertools
import re
from html.parser import HTMLParser

import pytest

from conftest import run_cli, simple_op, tensor, write_spec
from param_compute.analysis.report import find_sweeps

pytest.importorskip("matplotlib")

VOID = {"meta", "img", "br", "hr", "link", "input"}

SPEC = {
    # two variants sweeping alpha over different shapes: one plot, two lines
    "torch.add": {"input_iterator": "RangeConfigIterator",
                  "input_data_generator": "PyTorch:DefaultDataGenerator",
                  "config": [{"input": [
                      {"args": [tensor(32, 64), {"type": "int", "value": [1, 3],
                                                 "__range__": ["value"]}]},
                      {"args": [tensor(64, 64), {"type": "int", "value": [1, 3],
                                                 "__range__": ["value"]}]}]}]},
    # a matmul sweeping its inner dim (tied by __copy__)
    "torch.mm": {"input_iterator": "RangeConfigIterator",
                 "input_data_generator": "PyTorch:DefaultDataGenerator",
                 "config": [{"input": [{"args": [
                     {"type": "tensor", "dtype": "float", "shape": [16, [8, 64, 28]],
                      "__range__": ["shape"]},
                     {"type": "tensor", "dtype": "float", "shape": [-1, 16],
                      "__copy__": [{"shape": [0, [0, 1]]}]}]}]}]},
    # a single fixed config: in the table, never plotted
    **simple_op("torch.relu", tensor(8)),
}


class _Checker(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.images, self.links, self.rows, self.errors = [], [], [], 0, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        for name in ("href", "src"):
            if name in attrs and tag != "img":
                self.links.append(attrs[name])
        if tag == "tr" and "tbody" in self.stack:
            self.rows += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    results = tmp / "r.json"
    run = run_cli("-c", write_spec(tmp, SPEC), "-i", "3", "-b", "--output", results)
    assert run.returncode == 0, run.stderr
    made = run_cli(results, "-o", tmp / "report.html", "--png-dir", tmp / "png",
                   module="param_compute.analysis.report")
    assert made.returncode == 0, made.stderr
    return tmp


def test_report_is_valid_self_contained_html(report):
    text = (report / "report.html").read_text()
    assert text.startswith("<!DOCTYPE html>")
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.errors == [] and checker.stack == []
    # nothing fetched from anywhere: no scripts, links, external images or stylesheets
    assert checker.links == [] and "<script" not in text and "url(" not in text
    assert not re.search(r"https?://", text)
    assert len(checker.images) == 2  # torch.add and torch.mm; torch.relu has no sweep
    for image in checker.images:
        assert image["src"].startswith("data:image/png;base64,") and image["alt"]
        png = base64.b64decode(image["src"].split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # the table: a row per run and pass (6 + 3 + 1 runs, forward and backward)
    assert checker.rows == 2 * 10
    assert "arg0.shape[1] = arg1.shape[0]" in text  # the tied dims named together
    assert sorted(p.name for p in (report / "png").iterdir()) == ["01_torch.add.png",
                                                                  "02_torch.mm.png"]


def _record(run_id, args, median, flops=None):
    stats = {"n": 3, "median": median, "p10": median * 0.9, "p90": median * 1.1}
    record = {"op_name": "op", "id": run_id, "status": "ok", "stats": {"forward": stats},
              "config": {"build": None, "input": {"args": args}}}
    if flops:
        record["throughput"] = {"forward": {"tflops_per_s": flops / median / 1e9}}
    return record


def test_sweep_axes():
    # one variant, alpha swept: x = arg1; GFLOP/s where FLOPs are known
    records = [_record(f"0|0|0_{i}", [tensor(8, 8), {"type": "int", "value": v}], 1.0 + v,
                       flops=1e6) for i, v in enumerate((1, 2, 4))]
    [sweep] = find_sweeps("op", records)
    assert sweep.x_label == "arg1" and sweep.rate_label == "GFLOP/s" and not sweep.scatter
    [line] = sweep.lines
    assert [p.x for p in line.points] == [1, 2, 4]
    assert line.points[0].rate == pytest.approx(1e6 / 2.0 / 1e6)
    # variants sweeping different dims: one plot each
    records = ([_record(f"0|0|0_{i}", [tensor(n, 8)], 1.0) for i, n in enumerate((1, 2))]
               + [_record(f"0|0|1_{i}", [tensor(8, n)], 1.0) for i, n in enumerate((1, 2))])
    assert [s.x_label for s in find_sweeps("op", records)] == ["arg0.shape[0]",
                                                               "arg0.shape[1]"]
    # a 3 x 3 x 3 grid: too many lines, plotted against the estimated work
    grid = [_record(f"0|0|0_{i}", [tensor(a, b, c)], 1.0)
            for i, (a, b, c) in enumerate(itertools.product((1, 2, 3), repeat=3))]
    [sweep] = find_sweeps("op", grid)
    assert sweep.scatter and sweep.x_label == "estimated FLOPs per call"
    # nothing swept, or a lone run: no plot
    assert find_sweeps("op", [_record("0|0|0", [tensor(8)], 1.0)]) == []
    assert find_sweeps("op", [_record(f"{i}|0|0", [tensor(8)], 1.0) for i in range(3)]) == []


def test_bad_results_file_exits_2(tmp_path):
    result = run_cli(tmp_path / "none.json", module="param_compute.analysis.report")
    assert result.returncode == 2 and "no such file" in result.stderr
    assert "Traceback" not in result.stderr

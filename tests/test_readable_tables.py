"""Tables people can read: every run's config in a few characters, layouts that fit 80, 120 and
200 columns without wrapping a row, --max-rows/--sort, a dry run that lists what it planned,
and progress lines off a terminal."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

import param_compute
import param_compute.results.sinks.console as console_module
from conftest import run_cli, simple_op, tensor, write_spec
from param_compute.plan.summary import config_label
from param_compute.results.sinks.console import ConsoleReporter


def _t(*shape, dtype="float"):
    return {"type": "tensor", "dtype": dtype, "shape": list(shape)}


@pytest.mark.parametrize("config, label", [
    ({"input": {"args": [_t(64, 4096, dtype="bfloat16"), _t(4096, 512, dtype="bfloat16")]}},
     "64×4096·4096×512 bf16"),
    ({"input": {"args": [_t(8, 8), _t(8, dtype="long")]}}, "8×8:f32·8:i64"),
    ({"input": {"args": [_t()], "kwargs": {"alpha": {"type": "float", "value": 0.00012345},
                                            "out": {"type": "none", "value": None}}}},
     "[]·alpha=0.0001234 f32"),
    ({"input": {"args": [{"type": "genericlist", "value": [_t(2, 3), _t(4, 3)]},
                         {"type": "int", "value": 0}]}}, "[2×3,4×3]·0 f32"),
    ({"build": {"args": [{"type": "int", "value": 256}, {"type": "int", "value": 512}],
                "kwargs": {"bias": {"type": "bool", "value": True}}},
      "input": {"args": [_t(32, 256)]}}, "(256·512·bias=True) 32×256 f32"),
    ({"build": {"args": [{"type": "str", "value": "aten::mul.Tensor(Tensor self, Tensor "
                                                  "other) -> Tensor"}]},
      "input": {"args": [_t(4), _t(4)]}}, "4·4 f32"),
    ({"input": {"args": [{"type": "str", "value": "a very long string indeed, too long"}]}},
     "a very long str…"),
    ({"input": {"args": [{"type": "dtype", "value": "torch.bfloat16"},
                         {"type": "tuple", "value": [{"type": "int", "value": 1}]}]}},
     "bf16·(1)"),
    (None, ""),
])
def test_config_label(config, label):
    assert config_label(config) == label


def test_config_label_is_cut_to_a_width():
    config = {"input": {"args": [_t(64, 4096, dtype="bfloat16"), _t(4096, 512)]}}
    assert config_label(config, 10) == "64×4096:b…"
    assert len(config_label(config, 10)) == 10


def _spec(sizes):
    spec = {"torch.mm": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": []}}
    for n in sizes:
        spec["torch.mm"]["config"].append(
            {"input": [{"args": [tensor(n, n, requires_grad=False),
                                 tensor(n, n, requires_grad=False)]}]})
    return spec


def _printed(width, spec=None, **reporter):
    out = io.StringIO()
    sink = ConsoleReporter(None, progress=False,
                           console=Console(file=out, width=width, color_system=None),
                           **reporter)
    param_compute.run(spec or _spec([8, 96, 32, 64, 16]), sinks=[sink], warmup=0, iteration=3,
                      backward=False)
    return out.getvalue()


@pytest.mark.parametrize("width, shown, gone", [
    (80, ["config", "median", "95% CI", "8×8·8×8 f32"], ["id", "p10", "TFLOP/s", "% peak"]),
    (120, ["id", "config", "% peak", "96×96·96×96 f32"], ["p10", "TFLOP/s"]),
    (200, ["id", "config", "p10 – p90", "TFLOP/s", "GB/s", "% peak"], []),
])
def test_table_fits_the_width_without_wrapping_rows(width, shown, gone):
    text = _printed(width)
    table = [line for line in text.splitlines() if line.startswith(("│", "┃"))]
    assert len(table) == 1 + 5  # the header line and one line per run: nothing wraps
    assert all(len(line) <= width for line in text.splitlines() if line[:1] in "┏┃┡│└")
    for word in shown:
        assert word in text, (word, text)
    header = table[0]
    for word in gone:
        assert word not in header, (word, text)


def test_max_rows_and_sort_keep_the_slowest_runs_first():
    # sizes at least 8x apart in work: a busy machine's noise on 3 iterations
    # cannot reorder them (96 and 64 were once read the other way round)
    spec = _spec([8, 192, 32, 96, 16])
    text = _printed(200, spec, max_rows=2, sort="median")
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert [("192×192" in rows[0]), ("96×96" in rows[1])] == [True, True]
    assert "... 3 more runs in the results file (--max-rows all" in text
    every = _printed(200, spec, max_rows=None, sort="config")
    labels = [line.split("│")[3].strip() for line in every.splitlines()
              if line.startswith("│")]
    assert labels == sorted(labels) and len(labels) == 5
    in_order = _printed(200, spec, max_rows=None)
    assert [line.split("│")[3].split("×")[0].strip() for line in in_order.splitlines()
            if line.startswith("│")] == ["8", "192", "32", "96", "16"]


def test_cli_max_rows_and_sort_flags(tmp_path):
    spec = write_spec(tmp_path, _spec([8, 48, 16]))
    done = run_cli("-c", spec, "--output", tmp_path / "r.json", "--max-rows", "1",
                   "--sort", "median", "-i", "3")
    assert done.returncode == 0, done.stderr
    assert "48×48·48×48 f32" in done.stdout and "8×8·8×8" not in done.stdout
    bad = run_cli("-c", spec, "--output", tmp_path / "s.json", "--max-rows", "some")
    assert bad.returncode == 2 and "expected a number of rows >= 0 or 'all'" in bad.stderr


def test_dry_run_lists_the_planned_configs(tmp_path):
    spec = write_spec(tmp_path, _spec([8, 16]))
    done = run_cli("-c", spec, "--output", tmp_path / "r.json", "--dry-run")
    assert done.returncode == 0, done.stderr
    planned = [line for line in done.stdout.splitlines() if "planned" in line and "│" in line]
    assert len(planned) == 2
    assert "8×8·8×8 f32" in planned[0] and "16×16·16×16 f32" in planned[1]


def test_progress_lines_at_info_off_a_terminal(monkeypatch, caplog):
    monkeypatch.setattr(console_module, "PROGRESS_EVERY_S", 0.0)
    sink = ConsoleReporter(None, console=Console(file=io.StringIO(), width=120))
    assert not sink.show_progress and sink.log_progress  # pytest's stderr is no terminal
    with caplog.at_level(logging.INFO, logger="param_compute"):
        param_compute.run(_spec([8, 16]), sinks=[sink], warmup=0, iteration=1)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress")]
    assert len(lines) == 2
    assert lines[0].startswith("progress: 1/2 runs in") and "torch.mm 0|0|0 8×8·8×8" in lines[0]
    assert lines[1].startswith("progress: 2/2 runs")
    quiet = ConsoleReporter(None, progress=False, console=Console(file=io.StringIO()))
    assert not quiet.log_progress


def test_too_few_values_advice_fits_the_protocol_that_was_used(tmp_path):
    spec = write_spec(tmp_path, _spec([8]))
    plain = run_cli("-c", spec, "--output", tmp_path / "a.json", "-i", "2")
    assert "(they ran with PARAM's counts, -w 1 -i 2: without -w/-i the default protocol " \
           "measures by time until the median is sure)" in plain.stdout + plain.stderr
    default = run_cli("-c", spec, "--output", tmp_path / "d.json")
    assert "too few to trust" not in default.stdout + default.stderr  # at least 5 values
    timed = run_cli("-c", spec, "--output", tmp_path / "b.json", "-i", "1", "--max-iteration",
                    "2", "--warmup-time", "0.01", "--min-time", "0.001")
    assert "PARAM's counts" not in timed.stdout + timed.stderr
    assert "they ran with --warmup-time 0.01 --min-time 0.001: a longer --min-time" in \
        timed.stdout + timed.stderr

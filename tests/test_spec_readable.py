"""Specs that are hard to misread: --explain writes every ranged value out, a variant that
expands far beyond what it literally lists gets a warning, and __copy__ of a whole attribute
sweeps a dtype across arguments together."""

from __future__ import annotations

import logging

import pytest

import param_compute
from conftest import run_cli, write_spec
from param_compute.errors import SpecError


def _mm(*args, iterator="RangeConfigIterator"):
    return {"torch.mm": {"input_iterator": iterator,
                         "input_data_generator": "PyTorch:DefaultDataGenerator",
                         "config": [{"input": [{"args": list(args)}]}]}}


def _ranged(shape, **extra):
    return {"type": "tensor", "dtype": "float", "shape": shape, "__range__": ["shape"], **extra}


def test_explain_writes_each_range_out_and_runs_nothing(tmp_path):
    spec = write_spec(tmp_path, _mm(_ranged([[64, 256, 64], [128, 256, 128]]),
                                    {"type": "tensor", "dtype": "float", "shape": [-1, 16],
                                     "__copy__": [{"shape": [0, [0, 1]]}]}))
    done = run_cli("-c", spec, "--explain", "--output", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "torch.mm.config[0].input[0]: 8 run(s); written as 2 value(s): ranges multiply",
        "  args[0].shape[0]: 64, 128, 192, 256   (range [64, 256, 64])",
        "  args[0].shape[1]: 128, 256   (range [128, 256, 128])",
        "  args[1].shape[0] = args[0].shape[1]   (__copy__)",
    ]
    assert not (tmp_path / "r.json").exists()


def test_explain_cuts_long_axes_and_says_how_many_more(tmp_path):
    spec = write_spec(tmp_path, _mm(_ranged([[1, 100], 4]), _ranged([4, 4])))
    done = run_cli("-c", spec, "--explain")
    line = done.stdout.splitlines()[1]
    assert line == ("  args[0].shape[0]: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, … (88 more)"
                    "   (range [1, 100, 1])")


def test_a_list_of_shapes_written_as_ranges_is_warned_about(caplog):
    trap = _mm(_ranged([[64, 256, 64], [128, 256, 128]]), _ranged([[128, 256, 128],
                                                                   [64, 256, 64]]))
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        plan = param_compute.run(trap, dry_run=True)
    assert len(plan.records) == 64
    assert "torch.mm.config[0].input[0]: expands to 64 runs from 2 values written" in caplog.text
    assert "use __list__ for a list of whole alternatives" in caplog.text


def test_an_honest_range_is_not_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="param_compute"):
        param_compute.run(_mm(_ranged([[8, 64, 8], 8]), _ranged([8, 8])), dry_run=True)
        param_compute.run(_mm(_ranged([8, [1, 64]]), _ranged([[1, 64], 8])), dry_run=True)
    assert "expands to" not in caplog.text


def test_copy_of_a_whole_dtype_sweeps_both_arguments_together():
    spec = _mm({"type": "tensor", "dtype": ["float", "bfloat16"], "shape": [8, 8],
                "__range__": ["dtype"]},
               {"type": "tensor", "shape": [8, 8], "__copy__": [{"dtype": 0}]})
    records = param_compute.run(spec, warmup=0, iteration=1).records
    pairs = [[arg["dtype"] for arg in r["config"]["input"]["args"]] for r in records]
    assert pairs == [["float", "float"], ["bfloat16", "bfloat16"]]
    assert all(r["status"] == "ok" for r in records)


def test_copy_of_a_whole_shape_fills_every_placeholder():
    spec = _mm(_ranged([[4, 8, 4], [4, 8, 4]]),
               {"type": "tensor", "dtype": "float", "shape": [-1, -1],
                "__copy__": [{"shape": 0}]})
    records = param_compute.run(spec, dry_run=True).records
    assert [r["config"]["input"]["args"][1]["shape"] for r in records] == \
        [[4, 4], [4, 8], [8, 4], [8, 8]]


@pytest.mark.parametrize("copy, other, message", [
    ({"dtype": 5}, {}, "__copy__[0].dtype: source arg index 5 is out of range: there are 2 args"),
    ({"dtype": 1}, {}, "__copy__[0].dtype: copies 'dtype' from itself (arg 1)"),
    ({"dtype": 0}, {"arg0": {"type": "int", "value": 3}},
     "copies 'dtype' from arg 0, a int arg, into a tensor arg"),
    ({"dtype": 0}, {"ranged": True}, "'dtype' is copied from arg 0 and also varied here"),
    ({"dtype": "0"}, {}, "a copy is [target_index, [source_arg_index, source_element_index]] "
                         "(one element) or source_arg_index (the whole attribute"),
    ({"shape": [0, [0, 1.5]]}, {}, "args[1].__copy__[0].shape[1][1]: expected integer, got "
                                   "number 1.5"),
])
def test_bad_copies_are_refused_with_their_path(copy, other, message):
    first = other.get("arg0", {"type": "tensor", "dtype": ["float", "bfloat16"],
                               "shape": [8, 8], "__range__": ["dtype"]})
    second = {"type": "tensor", "shape": [8, 8], "__copy__": [copy]}
    if other.get("ranged"):
        second.update(dtype=["float", "double"], __range__=["dtype"])
    with pytest.raises(SpecError) as raised:
        param_compute.run(_mm(first, second), dry_run=True)
    assert message in str(raised.value)


def test_a_tensor_without_dtype_or_dtype_copy_is_still_refused():
    spec = _mm({"type": "tensor", "shape": [8, 8]}, {"type": "tensor", "shape": [8, 8],
                                                     "dtype": "float"},
               iterator="DefaultConfigIterator")
    with pytest.raises(SpecError) as raised:
        param_compute.run(spec, dry_run=True)
    assert "args[0]: missing required key 'dtype'" in str(raised.value)
    assert '"__copy__": [{"dtype": ARG}]' in str(raised.value)

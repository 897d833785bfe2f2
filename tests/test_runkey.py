"""One owner per concept: the run key (build, format, parse, order) and the run options' one
JSON form (results header, Nsight batch file, isolated worker)."""

from __future__ import annotations

import json
from pathlib import Path
import random

import pytest

from param_compute.errors import OptionsError
from param_compute.plan.runkey import RunKey, RunKeyError, id_order, key_of
from param_compute.plan.runplan import PlannedRun
from param_compute.runtime.options import RunOptions


def test_build_format_and_round_trip():
    key = RunKey.of("torch.mm", 2, "1_10", 3)
    assert key == RunKey("torch.mm", 2, "1_10", "3")
    assert key.id == "2|1_10|3" and key.text == str(key) == "torch.mm|2|1_10|3"
    assert key.config_build == "2|1_10"
    assert RunKey.parse(key.text) == key
    assert RunKey.from_id("torch.mm", key.id) == key
    assert RunKey.from_config_build("torch.mm", "2|1_10", 3) == key
    assert RunKey.from_record({"op_name": "torch.mm", "id": "2|1_10|3"}) == key
    assert key_of("torch.mm", key.id) == key.text
    # the plan's runs carry the same texts
    run = PlannedRun("torch.mm", 0, 2, "1_10", None, "3", {})
    assert (run.id, run.key) == (key.id, key.text)


@pytest.mark.parametrize("text,message", [
    ("torch.mm|0|0", "4 parts separated by '|'), got 3"),
    ("torch.mm|0|0|0|0", "got 5 part(s)"),
    ("|0|0|0", "the operator name is empty"),
    ("torch.mm|x|0|0", "the config index 'x' is not a number"),
    ("torch.mm|-1|0|0", "the config index '-1' is not a number"),
    ("torch.mm|0||0", "the build id is empty"),
    ("torch.mm|0|0|", "the input id is empty"),
    (7, "expected text"),
])
def test_malformed_keys_say_what_is_wrong(text, message):
    with pytest.raises(RunKeyError) as caught:
        RunKey.parse(text)
    assert message in str(caught.value) and repr(text) in str(caught.value)


def test_malformed_ids_and_records():
    with pytest.raises(RunKeyError, match="expected config|build|input"):
        RunKey.from_id("op", "0|1")
    with pytest.raises(RunKeyError, match="needs op_name and id"):
        RunKey.from_record({"id": "0|0|0"})


def test_order_is_the_plan_order():
    plan = ["b|0|0|0_2", "b|0|0|0_10", "b|0|0|1_0", "b|0|0_1|3", "b|1|0|0", "b|10|0|0",
            "a|0|0|0"]
    keys = [RunKey.parse(t) for t in plan]
    ops = ["b", "a"]
    shuffled = keys[:]
    random.Random(0).shuffle(shuffled)
    assert sorted(shuffled, key=lambda k: k.order(ops)) == keys
    assert sorted(shuffled, key=lambda k: k.order({"b": 0, "a": 1})) == keys
    # without the spec's operator order: by name, numbers as numbers
    assert sorted(shuffled)[:2] == [RunKey.parse("a|0|0|0"), RunKey.parse("b|0|0|0_2")]
    assert RunKey.parse("b|0|0|0_9") < RunKey.parse("b|0|0|0_10")
    # ids a custom iterator made with other parts still sort, after those of their op that parse
    assert id_order(ops, "b", "0|0|0") < id_order(ops, "b", "x|y") < id_order(ops, "a", "0|0|0")


def test_options_one_json_form_round_trip():
    options = RunOptions(device="cuda:1", warmup=3, iteration=7, backward=True,
                         exec_mode="continuous", seed=5, resume_id="torch.mm|0|0|1",
                         min_time=0.5, cuda_l2_cache=True, max_memory=1 << 30, timeout=2.5,
                         nvtx_iterations=True, allow_namespaces=["fbgemm"],
                         workloads_dirs=[Path("/plugins")], isolate_custom=False)
    text = json.dumps(options.to_json())  # plain JSON
    assert RunOptions.from_json(json.loads(text)) == options
    assert RunOptions.from_json(RunOptions().to_json()) == RunOptions()
    values = json.loads(text)
    assert options.allow_namespaces == ("fbgemm",) and options.workloads_dirs == ("/plugins",)
    # PARAM readers' keys in PARAM's forms, beside ours: the header needs no second form
    assert values["cuda_l2_cache"] is True and values["pass_type"] == "ExecutionPass.BACKWARD"
    assert values["exec_mode"] == "continuous"
    assert values["op_exec_mode"] == "OpExecutionMode.CONTINUOUS"
    assert values["time_unit"] == "millisecond" and values["pt2-model"] is False
    assert RunOptions.from_json(dict(values, cuda_l2_cache="on")) == options  # older files
    # a results header holds more keys (the spec, its digest, PARAM's): read with ignore_unknown
    header_options = dict(values, config_file="spec.json", spec_sha256="ab", time_unit="ms",
                          cuda_l2_cache=True)
    assert RunOptions.from_json(header_options, ignore_unknown=True) == options


@pytest.mark.parametrize("values,message", [
    ({"warmup": "3"}, "options.warmup: expected an integer or null, got '3'"),
    ({"backward": 1}, "options.backward: expected true/false, got 1"),
    ({"exec_mode": "fast"}, "options.exec_mode: expected one of discrete"),
    ({"timeout": True}, "options.timeout: expected a number or null, got True"),
    ({"max_memory": [1]}, "options.max_memory: expected an integer or text or null"),
    ({"speed": 1}, "options.speed: not a run option"),
    ([1], "options: expected a JSON object, got list"),
])
def test_options_json_errors_name_the_key(values, message):
    with pytest.raises(OptionsError) as caught:
        RunOptions.from_json(values, "options")
    assert message in str(caught.value)

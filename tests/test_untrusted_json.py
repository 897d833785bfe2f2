"""Step files and traces parsed under bounds that hold before they are in memory, and step files
of another spec, or of a spec changed since, named (issue 31).

``param_compute/untrusted_json.py`` tells a parse's memory before it starts (an upper bound from
the text's shape, held here above the measured size of the densest shapes and near it on real
files) and refuses a text that would not fit, saying how much it would take; a step file's calls
are counted before its parse. The issue's probes and this file's own (duplicate keys, deep
nesting, NaN, huge integers, forward references, holds past the end, a gzip bomb inside the
cap, symbolic links, devices) each assert their message and exit status.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tracemalloc
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_cli
from param_compute import untrusted_json
from param_compute.capture.accounting import TraceError
from param_compute.capture.live.dispatch import capture_ops
from param_compute.capture.trace import files as trace_io
from param_compute.formatting import format_bytes
from param_compute.spec import step_file
from param_compute.spec.step_file import StepFileError, read_step_file, step_path

CAPTURE = "param_compute.cli.capture"
RUN = "param_compute.cli.main"
TRACES = REPO.parent / "shared" / "traces"
#: A tiny call of the captured spec below (``relu`` of one external).
TINY_CALL = '{"run":"aten::relu|0|0|0","ext":[[[0],0]]}'


def _budget(monkeypatch, mib: int) -> None:
    """The memory available, as this test says (a parse may take half of it)."""
    monkeypatch.setattr(untrusted_json, "memory_available",
                        lambda: (mib * 2**20, "a test's budget"))


def _no_parse(monkeypatch) -> None:
    """Any parse from here on fails the test: a refusal must come before it."""
    def parsed(*args, **kwargs):
        raise AssertionError("the text was parsed")
    monkeypatch.setattr(untrusted_json, "_loads", parsed)


def _tiny_step(path: Path, calls: int, spec: str = "a.json", extra: str = "") -> Path:
    path.write_text('{"format":"param_compute.step","version":1,"spec":"%s","externals":1,'
                    '"calls":[%s]%s}' % (spec, ",".join([TINY_CALL] * calls), extra))
    return path


def _capture(folder: Path, name: str = "a", size: int = 4) -> Path:
    x = torch.randn(size, size)
    with capture_ops() as cap:
        torch.relu(x @ x)
    spec = folder / f"{name}.json"
    cap.write(spec)
    return spec


def _run(spec: Path, *args) -> subprocess.CompletedProcess:
    return run_cli("run", "-c", spec, "--no-progress", "-w", "1", "-i", "1", *args, module=RUN)


def _step_line(results: Path) -> dict:
    [line] = [json.loads(text) for text in results.read_text().splitlines()
              if json.loads(text).get("kind") == "step"]
    return line


# -- the estimate ---------------------------------------------------------------------------
def _parsed_size(text: str) -> int:
    collecting = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        value = json.loads(text)
        size = tracemalloc.get_traced_memory()[0]
        del value
    finally:
        tracemalloc.stop()
        if collecting:
            gc.enable()
    return size


DENSE = {"empty objects": "{}", "one key": '{"a":0}', "six keys": '{"a":0,"b":0,"c":0,'
         '"d":0,"e":0,"f":0}', "eleven keys": "{" + ",".join(f'"k{i}":0' for i in range(11)) + "}",
         "empty arrays": "[]", "one item": "[0]", "five items": "[0,0,0,0,0]",
         "nine arrays": "[" + ",".join(["[]"] * 9) + "]", "nested": "[[[[]]]]",
         "numbers": "1000", "floats": "1.5", "long integers": "9" * 4300, "short strings": '"ab"',
         "escapes": '"a\\"b\\\\"', "astral string": '"\U0001F600' + "a" * 500 + '"',
         "astral escape": '"\\ud83d\\ude00' + "a" * 500 + '"', "two-byte string": '"\u4e00\u4e00"',
         "literals": "true", "objects of objects": '{"a":{"b":{}}}',
         "arrays nested deep": "[" * 90 + "]" * 90, "objects nested deep": '{"":' * 90 + "0"
         + "}" * 90}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_the_estimate_bounds_the_parse_of_the_densest_shapes(name):
    item = DENSE[name]
    text = "[" + ",".join([item] * (300 if len(item) > 100 else 5000)) + "]"
    assert untrusted_json.shape_of(text).parsed_bytes() >= _parsed_size(text)


def test_no_text_parses_to_more_than_max_expansion_bytes_a_character():
    """What lets a small text be parsed without counting its shape."""
    for item in DENSE.values():
        text = "[" + ",".join([item] * (300 if len(item) > 100 else 5000)) + "]"
        assert _parsed_size(text) <= untrusted_json.MAX_EXPANSION * len(text), item[:20]


def test_every_key_unique_is_within_the_estimate_too():
    per_object = "[" + ",".join('{"k%07d":0}' % i for i in range(5000)) + "]"
    one_object = "{" + ",".join('"k%07d":0' % i for i in range(5000)) + "}"
    for text in (per_object, one_object):
        assert untrusted_json.shape_of(text).parsed_bytes() >= _parsed_size(text)


def _real_texts():
    texts = {"step file": '{"format":"param_compute.step","version":1,"externals":4,"calls":['
             + ",".join('{"run":"aten::mm|0|%d|2","in":[[[0],%d,[0]],[[1],%d,[0]]],"ext":'
                        '[[[2],3]],"original_us":12.5,"faults":3.0}' % (i % 50, i, i)
                        for i in range(20000)) + "]}"}
    for name in ("linear_et.json.gz", "linear_kineto.json.gz", "resnet_et.json.gz"):
        if (TRACES / name).is_file():
            with gzip.open(TRACES / name) as stream:
                texts[name] = stream.read().decode()
    return texts


def test_the_estimate_stays_near_real_traces_and_step_files():
    """An upper bound, and not a loose one: within 1.8x of the measured parse (the shared
    traces where they are beside the checkout)."""
    for name, text in _real_texts().items():
        actual = _parsed_size(text)
        estimate = untrusted_json.shape_of(text).parsed_bytes() - untrusted_json.PARSE_OVERHEAD
        assert actual <= estimate <= 1.8 * actual + 2**20, (name, actual, estimate)


def test_the_shape_counts_outside_strings_only_and_across_blocks(monkeypatch):
    monkeypatch.setattr(untrusted_json, "_SCAN_BLOCK", 7)  # every string cut by a block's end
    text = '{"a{[,:":["x\\"{,", "\\\\", 1, {"b": "]:"}], "c": "\\\\\\""}'
    shape = untrusted_json.shape_of(text)
    assert (shape.objects, shape.arrays, shape.keys, shape.commas, shape.strings) == \
        (2, 1, 3, 4, 7)
    assert shape.string_chars == sum(len(s) + 2 for s in
                                     ('a{[,:', 'x\\"{,', '\\\\', 'b', ']:', 'c', '\\\\\\"'))


@pytest.mark.parametrize("text, where, key", [
    ('{"a": "{\\"b\\": 1}", "a": 2}', (), "a"),       # JSON inside a string, then a repeat
    ('{"x": [{"k\\\\": 1, "k\\\\": 2}]}', ("x", 0), "k\\"),  # a key ending in a backslash
    ('{"x": {"k" : 1, "k": 2}}', ("x",), "k"),           # one spaced from its colon
    ('[{"a": 1}, {"b": 1, "c": {"d": 1, "d": 1}}]', (1, "c"), "d"),
])
def test_duplicate_keys_are_found_whatever_the_text_around_them(text, where, key):
    with pytest.raises(untrusted_json.JsonRefused) as caught:
        untrusted_json.parse(text, 10)
    assert caught.value.where == where and caught.value.reason.startswith(
        f"duplicate key {key!r}")


@pytest.mark.parametrize("text", ['{"a": "{\\"b\\": 1, \\"b\\": 2}"}',  # inside a string
                                  '{"a\\"": 1, "a": 2}', '{"a" : 1, "b"\n:2}'])
def test_texts_without_duplicate_keys_parse(text):
    assert isinstance(untrusted_json.parse(text, 10), dict)


def test_memory_available_is_the_least_of_what_bounds_it(monkeypatch):
    monkeypatch.setattr(untrusted_json, "_kernel_number",
                        lambda path, key=None: {"MemAvailable:": 8 * 2**30,
                                                "VmSize:": 2**30}.get(key))
    monkeypatch.setattr(untrusted_json, "_cgroup_room", lambda: 5 * 2**30)
    monkeypatch.setattr(untrusted_json, "_address_space_room", lambda: 3 * 2**30)
    assert untrusted_json.memory_available() == (3 * 2**30, "the address-space limit "
                                                 "(ulimit -v) less what the process maps")
    assert untrusted_json.parse_budget()[0] == 3 * 2**29
    monkeypatch.setattr(untrusted_json, "_address_space_room", lambda: None)
    assert untrusted_json.memory_available()[1] == "the cgroup's memory limit less its use"


# -- probe 1: a step file parsed to 3.5 GB before its call limit was checked -----------------
def test_a_step_file_of_too_many_calls_is_refused_before_its_parse(tmp_path, monkeypatch):
    spec = _capture(tmp_path)
    monkeypatch.setattr(step_file, "MAX_CALLS", 1000)
    monkeypatch.setattr(step_file, "MAX_OTHER_OBJECTS", 10)
    big = _tiny_step(tmp_path / "big.step.json", 1200)
    _no_parse(monkeypatch)
    out = tmp_path / "r.json"
    result = _run(spec, "--step", big, "-o", out)
    assert result.returncode == 2, result.stderr
    assert (f"{big}: (top level): 1,201 JSON objects: more than a step file of at most 1,000 "
            "calls holds (one object per call, at most 10 more in original); nothing was "
            "parsed") in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert not out.exists()


def test_braces_inside_strings_are_no_calls(tmp_path, monkeypatch):
    monkeypatch.setattr(step_file, "MAX_CALLS", 10)
    monkeypatch.setattr(step_file, "MAX_OTHER_OBJECTS", 0)
    path = _tiny_step(tmp_path / "s.step.json", 3, extra=',"source":"%s"' % ("{" * 500))
    assert len(read_step_file(path)["calls"]) == 3


def test_a_step_file_whose_parse_would_not_fit_is_refused_saying_how_much(tmp_path,
                                                                         monkeypatch):
    spec = _capture(tmp_path)
    big = _tiny_step(tmp_path / "big.step.json", 50_000)
    _budget(monkeypatch, 40)
    _no_parse(monkeypatch)
    out = tmp_path / "r.json"
    result = _run(spec, "--step", big, "-o", out)
    assert result.returncode == 2, result.stderr
    assert f"{big}: (top level): parsing it would take an estimated " in result.stderr
    assert (f"(50,001 objects, 150,001 arrays, 150,007 strings in "
            f"{format_bytes(big.stat().st_size)} of JSON), over the 20 MiB one parse may take "
            "here (50% of 40 MiB: a test's budget); nothing was parsed") in result.stderr
    assert "MemoryError" not in result.stderr and "internal error" not in result.stderr
    assert not out.exists()


CAPPED_READ = textwrap.dedent("""
    import json, resource, sys
    with open("/proc/self/status") as status:
        mapped = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + 400 * 2**20, resource.RLIM_INFINITY))
    from param_compute.spec.step_file import StepFileError, read_step_file
    try:
        read_step_file(sys.argv[1])
        print("read")
    except StepFileError as exc:
        print("refused:", exc)
    try:
        with open(sys.argv[1]) as stream:
            json.load(stream)
        print("json.load: read")
    except MemoryError:
        print("json.load: MemoryError")
""")


def test_under_an_address_space_limit_a_big_step_file_is_refused_not_a_memory_error(tmp_path):
    """The issue's probe in a real process: 400 MB of address space left, a 40 MB step file
    of small calls, which a plain parse takes past the limit."""
    big = _tiny_step(tmp_path / "big.step.json", 950_000)
    done = subprocess.run([sys.executable, "-c", CAPPED_READ, str(big)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    *said, plain = done.stdout.strip().splitlines()
    refused = "\n".join(said)
    assert refused.startswith(f"refused: {big}: invalid step file, 1 problem:")
    assert "parsing it would take an estimated" in refused
    assert "(ulimit -v) less what the process maps); nothing was parsed" in refused
    assert plain == "json.load: MemoryError"  # what the probe met before


def test_a_large_valid_step_file_still_reads(tmp_path, monkeypatch):
    path = _tiny_step(tmp_path / "s.step.json", 100_000)
    assert len(read_step_file(path)["calls"]) == 100_000  # the machine's own budget
    small = _tiny_step(tmp_path / "small.step.json", 16_000)
    _budget(monkeypatch, 40)  # counted (its bytes x 32 are over 20 MiB), and it fits
    assert untrusted_json.check_memory(small.read_text()) is not None
    assert len(read_step_file(small)["calls"]) == 16_000


# -- probe 2: a trace under the 2 GiB cap was held whole --------------------------------------
def _nodes(count: int) -> list:
    return [{"id": i, "name": "x", "ctrl_deps": 0, "attrs": [], "inputs": {"values": [[i, i]]}}
            for i in range(1, count + 1)]


def _write_trace(path: Path, data: dict, wrapping: str) -> Path:
    text = json.dumps(data).encode()
    if wrapping == "gzip":
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(text, 1))
    elif wrapping == "tar":
        path = path.with_name(path.stem + ".tar.gz")
        with tarfile.open(path, "w:gz") as archive:
            info = tarfile.TarInfo("trace.json")
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
    else:
        path.write_bytes(text)
    return path


@pytest.mark.parametrize("wrapping", ["plain", "gzip", "tar"])
@pytest.mark.parametrize("which", ["--from-et", "--kineto"])
def test_a_trace_whose_parse_would_not_fit_is_refused_saying_how_much(tmp_path, monkeypatch,
                                                                      wrapping, which):
    small = _write_trace(tmp_path / "small.json", {"schema": "1.0.3", "nodes": _nodes(3)},
                         "plain")
    big_data = ({"schema": "1.0.3", "nodes": _nodes(60_000)} if which == "--from-et" else
                {"traceEvents": [{"ph": "X", "name": "x", "ts": i, "dur": 1, "pid": 1,
                                  "tid": 1} for i in range(60_000)]})
    big = _write_trace(tmp_path / "big.json", big_data, wrapping)
    _budget(monkeypatch, 40)
    argv = (["--from-et", big] if which == "--from-et" else
            ["--from-et", small, "--kineto", big])
    result = run_cli(*argv, "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2, result.stderr
    source = f"{big} (trace.json)" if wrapping == "tar" else f"{big}"
    assert f"{source}: parsing it would take an estimated " in result.stderr
    assert ("over the 20 MiB one parse may take here (50% of 40 MiB: a test's budget); "
            "nothing was parsed") in result.stderr
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "s.json").exists()


def test_a_gzip_bomb_inside_the_cap_is_refused_by_its_parse(tmp_path, monkeypatch):
    """20 MB of empty objects in a 60 KB file: under the 2 GiB cap on text, but 24 bytes a
    byte once parsed; refused at a peak of about the text, never parsed."""
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as stream:
        stream.write(b'{"nodes": [{}')
        for _ in range(20):
            stream.write(b",{}" * (2**20 // 3))
        stream.write(b"]}")
    assert bomb.stat().st_size < 200_000
    _budget(monkeypatch, 400)
    _no_parse(monkeypatch)
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match=r"bomb.json.gz: parsing it would take an estimated "
                                             r"1.625 GiB of memory \(6,990,502 objects"):
            trace_io.read_json(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * 20 * 2**20  # its text (as read, then decoded) and a block: not 480 MB
    result = run_cli("--from-et", bomb, "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2 and "parsing it would take an estimated" in result.stderr


def test_the_bytes_are_freed_before_the_parse(tmp_path):
    """The read holds the text once: at its peak the parsed trace and at most the text beside
    it (before: the bytes, the text and the parse, all at once)."""
    path = _write_trace(tmp_path / "t.json", {"schema": "1.0.3", "nodes": _nodes(40_000)},
                        "plain")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        trace = trace_io.read_json(path)
        parsed, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(trace["nodes"]) == 40_000
    assert peak - parsed < 1.5 * size, (peak, parsed, size)


# -- probe 3: a stale or foreign step file replayed without a word ---------------------------
def test_the_step_file_records_the_spec_it_was_captured_with(tmp_path):
    spec = _capture(tmp_path)
    step = json.loads(step_path(spec).read_text())
    digest = hashlib.sha256(spec.read_bytes()).hexdigest()
    assert step["spec"] == "a.json" and step["spec_sha256"] == digest
    out = tmp_path / "r.json"
    assert _run(spec, "--replay-step", "-o", out).returncode == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["run_options"]["spec_sha256"] == digest  # one hash, as a run computes it
    assert "stale" not in _step_line(out)["step"]


def test_a_foreign_step_file_is_refused_naming_both_files(tmp_path):
    spec = _capture(tmp_path, "a")
    other = _capture(tmp_path, "b", size=8)
    shutil.copy(step_path(other), step_path(spec))  # b's step file where a's belongs
    out = tmp_path / "r.json"
    result = _run(spec, "--replay-step", "-o", out)
    assert result.returncode == 2, result.stderr
    assert (f"{step_path(spec)}: this step file was captured with the spec 'b.json', not with "
            f"{spec} (the spec given): it belongs to another spec; name it with --step "
            f"{step_path(spec)} to replay it against this spec anyway") in result.stderr
    assert not out.exists()


def test_a_foreign_spec_name_is_shown_escaped_and_short(tmp_path):
    spec = _capture(tmp_path)
    step = json.loads(step_path(spec).read_text())
    step["spec"] = "\x1b[2Jevil" + "x" * 1000 + ".json"
    step["spec_sha256"] = "0" * 64  # another spec's
    step_path(spec).write_text(json.dumps(step))
    result = _run(spec, "--replay-step", "-o", tmp_path / "r.json")
    assert result.returncode == 2
    assert "captured with the spec '\\x1b[2Jevilxxx" in result.stderr
    assert "\x1b" not in result.stderr and len(result.stderr) < 2000


def test_a_foreign_step_file_named_with_step_is_warned_and_marked(tmp_path):
    spec = _capture(tmp_path, "a")
    other = step_path(_capture(tmp_path, "b", size=8))
    out = tmp_path / "r.json"
    result = _run(spec, "--step", other, "-o", out)
    assert result.returncode == 0, result.stderr
    assert (f"{other}: this step file was captured with the spec 'b.json', not with {spec} "
            "(the spec given): replaying it anyway (--step names it)") in result.stderr
    line = _step_line(out)
    assert line["step"]["foreign"] is True and line["config"]["input"]["foreign"] is True


def test_a_stale_step_file_is_warned_and_its_record_says_so(tmp_path):
    spec = _capture(tmp_path)
    recorded = json.loads(step_path(spec).read_text())["spec_sha256"]
    edited = json.loads(spec.read_text())
    edited["aten::relu"]["config"][0]["input"][0]["args"][0]["shape"] = [16, 16]
    spec.write_text(json.dumps(edited))
    digest = hashlib.sha256(spec.read_bytes()).hexdigest()
    out = tmp_path / "r.json"
    result = _run(spec, "--replay-step", "-o", out)
    assert result.returncode == 0, result.stderr
    assert (f"{step_path(spec)} is stale: {spec} changed since the capture (sha256 "
            f"{digest[:12]}..., the step file records {recorded[:12]}...)") in result.stderr
    assert result.stderr.count("is stale") == 1
    assert _step_line(out)["step"]["stale"] is True


def test_a_spec_renamed_with_its_step_file_is_current(tmp_path):
    spec = _capture(tmp_path)
    renamed = tmp_path / "renamed.json"
    shutil.copy(spec, renamed)
    shutil.copy(step_path(spec), step_path(renamed))
    out = tmp_path / "r.json"
    result = _run(renamed, "--replay-step", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "step file" not in result.stderr and "stale" not in result.stderr
    assert not {"stale", "foreign"} & set(_step_line(out)["step"])


def test_an_old_step_file_without_a_hash_is_said_once(tmp_path):
    spec = _capture(tmp_path)
    old = json.loads(step_path(spec).read_text())
    del old["spec_sha256"]
    step_path(spec).write_text(json.dumps(old))
    result = _run(spec, "--replay-step", "-o", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    said = (f"{step_path(spec)}: the step file records no spec_sha256 (it was written before "
            f"step files did), so whether it is current with {spec} cannot be told")
    assert result.stderr.count(said) == 1
    foreign = dict(old, spec="elsewhere.json")  # an old file of another name: foreign still
    step_path(spec).write_text(json.dumps(foreign))
    refused = _run(spec, "--replay-step", "-o", tmp_path / "r2.json")
    assert refused.returncode == 2 and "captured with the spec 'elsewhere.json'" in \
        refused.stderr


def test_a_spec_given_as_a_dict_says_it_cannot_tell(tmp_path, caplog):
    import param_compute

    spec = _capture(tmp_path)
    result = param_compute.run(json.loads(spec.read_text()), warmup=1, iteration=1,
                               step_file=str(step_path(spec)))
    assert result.exit_status == 0
    assert "the spec was given as a dict, so whether this step file" in caplog.text


@pytest.mark.parametrize("field, value, words", [
    ("spec", {"a": 1}, "spec: must be the spec's file name (a string of 1 to 4096 characters)"),
    ("spec", "", "spec: must be the spec's file name"),
    ("spec_sha256", "abc", "spec_sha256: must be a sha256 digest (64 lowercase hexadecimal "
                           "digits), not 'abc'"),
    ("spec_sha256", "G" * 64, "spec_sha256: must be a sha256 digest"),
])
def test_the_recorded_spec_is_checked_like_every_entry(tmp_path, field, value, words):
    path = _tiny_step(tmp_path / "s.step.json", 1)
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(StepFileError) as caught:
        read_step_file(path)
    assert f"{path}: {words}" in str(caught.value)


# -- own probes: hostile step files ----------------------------------------------------------
HEAD = '{"format":"param_compute.step","version":1,"spec":"a.json","externals":1,'
HOSTILE_STEPS = {
    "duplicate key in a call": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","run":"aten::mm|0|0|0"'
                                ',"ext":[[[0],0]]}]}',
                                "calls[0]: duplicate key 'run' (an object may name each key "
                                "once; a JSON reader would keep only the last)"),
    "calls given twice": (HEAD + '"calls":[%s],"calls":[]}' % TINY_CALL,
                          "(top level): duplicate key 'calls'"),
    "a duplicate key spaced from its colon": (HEAD + '"calls":[%s],"spec" :"x"}' % TINY_CALL,
                                              "(top level): duplicate key 'spec'"),
    "nested past the parser's limit": (HEAD + '"calls":[%s],"original":%s%s}'
                                       % (TINY_CALL, "[" * 100_000, "]" * 100_000),
                                       "(top level): nested more than 16 levels deep"),
    "nested 17 levels": (HEAD + '"calls":[%s],"original":{"x":%s%s}}'
                         % (TINY_CALL, "[" * 16, "]" * 16),
                         "(top level): nested more than 16 levels deep (at original.x)"),
    "NaN": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","original_us":NaN}]}',
            "(top level): NaN is not valid JSON (numbers must be finite)"),
    "-Infinity": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","faults":-Infinity}]}',
                  "(top level): -Infinity is not valid JSON"),
    "an integer of 5000 digits": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","ext":[[[0],%s]]}]}'
                                  % ("9" * 5000), "(top level): an integer of more than 4300 "
                                  "digits (no value here needs one)"),
    "a huge external index": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","ext":[[[0],%s]]}]}'
                              % ("9" * 30), "calls[0].ext[0]: external 99999999999999999999999"
                              "9999999 is not one of the 1 externals"),
    "a huge producer": (HEAD + '"calls":[%s,{"run":"aten::relu|0|0|0","in":[[[0],1%s,[0]]]}]}'
                        % (TINY_CALL, "0" * 30), "calls[1].in[0]: producer 1000000000000000"
                        "000000000000000 is not an earlier call (0 to 0)"),
    "a huge argument index": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","ext":[[[%s],0]]}]}'
                              % ("9" * 30), "calls[0].ext[0]: the argument path[0] must be an "
                              "argument index or a keyword name"),
    "a call reading a later one": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","in":[[[0],1,[0]]]}'
                                   ',%s]}' % TINY_CALL, "calls[0].in[0]: the first call cannot "
                                   "read an earlier call's output"),
    "a call reading itself": (HEAD + '"calls":[%s,{"run":"aten::relu|0|0|0","in":[[[0],1,[0]]]}]}'
                              % TINY_CALL, "calls[1].in[0]: producer 1 is not an earlier call"),
    "a hold past the end": (HEAD + '"calls":[{"run":"aten::relu|0|0|0","ext":[[[0],0]],'
                            '"hold":[[[0],5]]}]}', "calls[0].hold[0]: until 5 must be -1 (past "
                            "the step's end) or a call from this one (0) to the last (0)"),
    "no call": (HEAD + '"calls":[]}', "calls: holds no call: a step replay needs at least one"),
    "text after the object": (HEAD + '"calls":[%s]} trailing' % TINY_CALL,
                              "(top level): not valid JSON: Extra data at line 1 column"),
    "not UTF-8": (HEAD + '"calls":[%s],"source":"\udcff"}' % TINY_CALL,
                  "(top level): not UTF-8 text (byte"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_STEPS))
def test_hostile_step_files_are_named_at_their_entry(tmp_path, case):
    text, words = HOSTILE_STEPS[case]
    path = tmp_path / "s.step.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(StepFileError) as caught:
        read_step_file(path)
    message = str(caught.value)
    assert f"{path}: {words}" in message, message
    assert len(message) < 1000 and "\x1b" not in message


def test_a_hostile_step_file_ends_the_run_with_exit_2(tmp_path):
    spec = _capture(tmp_path)
    text, words = HOSTILE_STEPS["duplicate key in a call"]
    step_path(spec).write_text(text)
    out = tmp_path / "r.json"
    result = _run(spec, "--replay-step", "-o", out)
    assert result.returncode == 2 and f"{step_path(spec)}: {words}" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_a_linked_step_file_is_read_through_its_link_and_judged_by_its_content(tmp_path):
    spec = _capture(tmp_path, "a")
    other = _capture(tmp_path, "b", size=8)
    step_path(spec).unlink()
    step_path(spec).symlink_to(step_path(other))  # a.step.json -> b.step.json
    result = _run(spec, "--replay-step", "-o", tmp_path / "r.json")
    assert result.returncode == 2
    assert f"{step_path(spec)}: this step file was captured with the spec 'b.json'" in \
        result.stderr


@pytest.mark.parametrize("target, words", [("/dev/zero", "is a device, not a regular file"),
                                           (".", "is a directory")])
def test_a_step_file_that_is_no_regular_file_is_refused_unread(tmp_path, target, words):
    spec = _capture(tmp_path)
    result = _run(spec, "--step", target, "-o", tmp_path / "r.json")
    assert result.returncode == 2 and f"{target}: (top level): {words}" in result.stderr


def test_a_fifo_step_file_is_refused_without_waiting(tmp_path):
    spec = _capture(tmp_path)
    fifo = tmp_path / "fifo.step.json"
    os.mkfifo(fifo)
    result = run_cli("-c", spec, "--step", fifo, "--output", tmp_path / "r.json",
                     forked=True, timeout=120)
    assert result.returncode == 2 and f"{fifo}: (top level): is a FIFO" in result.stderr


# -- own probes: hostile traces --------------------------------------------------------------
def _valid():
    from test_hostile_traces import valid_trace

    return valid_trace()


def _capture_texts(tmp_path, trace_text: str, kineto_text: str = None):
    (tmp_path / "t.json").write_text(trace_text)
    argv = ["--from-et", tmp_path / "t.json"]
    if kineto_text is not None:
        (tmp_path / "k.json").write_text(kineto_text)
        argv += ["--kineto", tmp_path / "k.json"]
    return run_cli(*argv, "-o", tmp_path / "s.json", module=CAPTURE)


@pytest.mark.parametrize("where, edit, words", [
    ("trace", lambda t: t.replace('"id": 4,', '"id": 4, "id": 99,', 1),
     "t.json: nodes[3]: duplicate key 'id'"),
    ("trace", lambda t: t[:-1] + ', "nodes": []}', "t.json: duplicate key 'nodes'"),
    ("kineto", lambda k: k.replace('"dur": 5,', '"dur": 5, "dur": 7,', 1),
     "k.json: traceEvents[1]: duplicate key 'dur'"),
    ("trace", lambda t: t.replace('"id": 4,', '"id": %s,' % ("9" * 5000), 1),
     "t.json: an integer of more than 4300 digits"),
    ("kineto", lambda k: k.replace('"dur": 5', '"dur": NaN', 1),
     "k.json: traceEvents[1] (aten::t): dur is a number (nan), not a finite number"),
])
def test_hostile_trace_text_is_refused_naming_the_file_and_place(tmp_path, where, edit, words):
    trace, kineto = _valid()
    trace_text, kineto_text = json.dumps(trace), json.dumps(kineto)
    if where == "trace":
        trace_text = edit(trace_text)
    else:
        kineto_text = edit(kineto_text)
    result = _capture_texts(tmp_path, trace_text, kineto_text)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "s.json").exists()


def _set_input(node_index: int, path, value):
    def edit(trace):
        target = trace["nodes"][node_index]["inputs"]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


@pytest.mark.parametrize("edit, left_out", [
    (_set_input(3, ("shapes", 0), [10**30, 3]), "aten::mm x1"),
    (_set_input(3, ("shapes", 0), [-5, 3]), "aten::mm x1"),
    (_set_input(3, ("values", 0, 2), 10**30), "aten::mm x1"),  # a storage offset
    (_set_input(5, ("values", 2), 10**30), "aten::add.Tensor x1"),  # an Int argument
])
def test_integers_a_spec_cannot_hold_leave_their_call_out(tmp_path, edit, left_out):
    """A shape, offset or integer past 64 bits (or a negative size) is no argument a replay can
    make: the call is left out with its reason, and the spec written runs."""
    trace = json.loads(json.dumps(_valid()[0]))  # no list shared between nodes
    edit(trace)
    result = _capture_texts(tmp_path, json.dumps(trace))
    assert result.returncode == 0, result.stderr
    assert f"not captured: 1 calls, unreadable trace nodes: {left_out}" in result.stdout
    dry = _run(tmp_path / "s.json", "--dry-run", "-o", tmp_path / "dry.json")
    assert dry.returncode == 0, dry.stderr


def test_a_double_past_any_float_leaves_its_call_out(tmp_path):
    trace, _ = _valid()
    node = trace["nodes"][5]
    node["inputs"]["types"][2] = "Double"
    node["inputs"]["values"][2] = 10**400
    node["attrs"][1]["value"] = ("aten::add.Tensor(Tensor self, Tensor other, *, float "
                                 "alpha=1) -> Tensor")
    result = _capture_texts(tmp_path, json.dumps(trace))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads((tmp_path / "s.capture.json").read_text())
    assert any("a Double argument recorded as an integer" in entry["reason"]
               for entry in report["skipped"])


@pytest.mark.parametrize("recorded", ["[[[[[[[1]]]]]]]", '{"0": [1, 5], "0": [2, 3]}',
                                      '{"0": [NaN, 5]}', '{"0": [0, %s]}' % (10**30),
                                      '{"0": [0, 5]' + " " * 10])
def test_a_hostile_recorded_tensor_range_is_ignored(tmp_path, recorded):
    """``tensor_range`` is JSON inside the trace's JSON: parsed within the same bounds, and
    dropped (the shape-derived range kept) when it is no usable range."""
    from param_compute.capture.trace.execution_trace import tensor_ranges

    node = {"attrs": [{"name": "tensor_range", "type": "string", "value": recorded}]}
    assert tensor_ranges(node) == {}
    good = {"attrs": [{"name": "tensor_range", "type": "string", "value": '{"1": [0, 9]}'}]}
    assert tensor_ranges(good) == {1: [0, 9]}


def test_a_linked_trace_is_read_through_its_link(tmp_path):
    trace, _ = _valid()
    real = tmp_path / "real.json"
    real.write_text(json.dumps(trace))
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = run_cli("--from-et", link, "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 0, result.stderr


def test_every_untrusted_file_of_these_readers_goes_through_files_py():
    """The step file, the traces and the kernel's memory figures are opened by ``files.py``
    only (its one-owner test scans for any other open; here: these modules name it)."""
    for module in ("param_compute/spec/step_file.py", "param_compute/capture/trace/files.py",
                   "param_compute/untrusted_json.py"):
        source = (REPO / module).read_text()
        assert "from param_compute.files import" in source, module
        assert not re.search(r"(?<![\w.])open\s*\(|os\.open|\.read_(text|bytes)\(", source), \
            module

"""Hostile traces: a trace is data from another machine; capturing one runs nothing it names.

``tests/hostile_traces/`` holds execution traces (no recorded strides, so the layout replay on
meta tensors runs) whose nodes name code instead of tensor ops: ``import_module::__call__``,
``load_library::__call__``, ``aten::from_file``, ``aten::save``, namespaces such as ``os``,
``builtins``, ``torch``, dotted and dunder names, ``__call__`` overloads; allow-listed factories
recorded with a real device and a 4 TiB shape; a trace whose parent links form a cycle. Each is
captured with a planted module in the working directory that would leave a marker if imported,
and with the functions that import, load or run code replaced by recorders: nothing runs, every
hostile call is reported as left out. The bounded reads (size caps, gzip bombs, archive members,
depth, FIFOs and devices), the structural check of malformed traces and Kineto files (messages
naming the file, the node and the field), and capture's output checks are kept here too, with a
property test that no mutation of a valid trace raises anything but ``TraceError``.
"""

from __future__ import annotations

import copy
import ctypes
import gzip
import importlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tracemalloc
from pathlib import Path

import pytest
import torch

from conftest import run_cli
from param_compute.capture import capture_execution_trace
from param_compute.capture.trace import files as trace_io
from param_compute.capture.accounting import TraceError
from param_compute.capture.meta_ops import META_REPLAY_OPS, meta_operator, registered_overloads
from param_compute.capture.trace.files import read_json

CORPUS = Path(__file__).resolve().parent / "hostile_traces"
CAPTURE = "param_compute.cli.capture"
MARKER_MODULE = "hostile_marker_module"
#: Files a hostile node would leave behind had it run (relative to the working directory).
MARKERS = ("IMPORT_MARKER", "FROM_FILE_MARKER", "SAVE_MARKER", "OS_SYSTEM_MARKER",
           "EXEC_MARKER", "EVAL_MARKER", "SUBPROCESS_MARKER")

#: corpus file -> the labels of its hostile calls, each reported as not replayed on meta
#: tensors and as not captured (the benign aten::relu beside them is captured).
CORPUS_CASES = {
    "import_module_call.json": ["import_module::__call__.__call__"],
    "import_module_plain.json": ["import_module::__call__"],
    "load_library_call.json": ["load_library::__call__.__call__"],
    "load_library_plain.json": ["load_library::__call__"],
    "from_file.json": ["aten::from_file"],
    "save.json": ["aten::save"],
    "dotted_names.json": ["aten::from_file.default.__call__", "torch.ops::load_library",
                          "import_module.__call__::x"],
    "dunder_names.json": ["aten::__getattribute__.__call__", "__class__::__call__.__call__",
                          "aten::__class__.__call__", "_OpNamespace::__init__"],
    "call_overloads.json": ["aten::relu.__call__", "aten::view.__self__",
                            "aten::add.__globals__"],
    "foreign_namespaces.json": ["os::system", "builtins::exec", "builtins::eval", "torch::load",
                                "subprocess::run", "importlib::import_module"],
    "aten_side_effects.json": ["aten::load", "aten::_print", "aten::manual_seed",
                               "aten::_cufft_set_plan_cache_max_size"],
    "terminal_escapes.json": ["aten::\x1b[2J\x1b]0;pwned\x07relu", "evil\x1b[31m::op"],
}


def _plant(folder: Path) -> None:
    """A module that leaves a marker file when imported, where an import would find it."""
    (folder / f"{MARKER_MODULE}.py").write_text(
        "import pathlib\npathlib.Path('IMPORT_MARKER').write_text('imported')\n")


@pytest.fixture
def recorders(monkeypatch, tmp_path):
    """Every way a trace's text could have run code, replaced by a recorder; cwd is a folder
    holding the planted module, on the import path."""
    calls = []

    def recorder(name):
        def record(*args, **kwargs):
            calls.append((name, args))
            raise RuntimeError(f"{name} called by a trace")
        return record

    real_import = importlib.import_module

    def watched_import(name, package=None):  # the tool imports its own modules: let those be
        if not str(name).startswith(("param_compute", "torch")):
            calls.append(("importlib.import_module", (name,)))
        return real_import(name, package)

    _plant(tmp_path)
    (tmp_path / "libhostile.so").write_bytes(b"\x7fELF not really")  # the path the trace names
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(importlib, "import_module", watched_import)
    monkeypatch.setattr(torch.ops, "load_library", recorder("torch.ops.load_library"))
    monkeypatch.setattr(torch.ops, "import_module", recorder("torch.ops.import_module"))
    monkeypatch.setattr(ctypes, "CDLL", recorder("ctypes.CDLL"))
    monkeypatch.setattr(os, "system", recorder("os.system"))
    monkeypatch.setattr(subprocess, "run", recorder("subprocess.run"))
    monkeypatch.setattr(subprocess, "Popen", recorder("subprocess.Popen"))
    return calls


def _no_markers(folder: Path) -> None:
    left = [name for name in MARKERS if (folder / name).exists()]
    assert left == [], f"a hostile trace ran code: {left}"


@pytest.mark.parametrize("name", sorted(CORPUS_CASES))
def test_hostile_nodes_never_run_and_are_reported(name, recorders, tmp_path):
    sys.modules.pop(MARKER_MODULE, None)
    libraries = set(torch.ops.loaded_libraries)
    result = run_cli("--from-et", CORPUS / name, "-o", tmp_path / "spec.json",
                     "--allow-namespace", "os", "--allow-namespace", "import_module",
                     "--allow-namespace", "builtins", "--allow-namespace", "torch",
                     module=CAPTURE, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert recorders == [] and MARKER_MODULE not in sys.modules
    assert set(torch.ops.loaded_libraries) == libraries
    _no_markers(tmp_path)
    assert "PRINTED_BY_TRACE" not in result.stdout + result.stderr
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert list(spec) == ["aten::relu", "__capture__"]  # the one operator, and its settings
    report = json.loads((tmp_path / "spec.capture.json").read_text())
    left_out = report["strides"]["not_replayed"]
    hostile = CORPUS_CASES[name]
    for label in hostile:
        assert any(reason.startswith(label) for reason in left_out), (label, left_out)
    assert sum(left_out.values()) == len(hostile)
    assert report["skipped_calls"] == len(hostile)
    assert report["strides"]["meta_failures"] == 0
    assert "calls not replayed on meta tensors" in result.stdout
    assert "not captured" in result.stdout
    assert "\x1b" not in result.stdout + result.stderr  # names from the trace, escaped


def test_the_issue_probe_import_module_runs_nothing_from_the_command_line(tmp_path):
    """The exact probe of the issue: a real process, the module planted in its cwd."""
    _plant(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "param_compute.capture", "--from-et",
         str(CORPUS / "import_module_call.json"), "-o", "spec.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert result.returncode == 0, result.stderr
    _no_markers(tmp_path)
    assert "import_module::__call__.__call__" in result.stdout


@pytest.mark.parametrize("name", ["factory_real_device.json", "factory_no_device.json"])
def test_allowed_factories_run_on_meta_whatever_device_the_trace_records(name, recorders,
                                                                         tmp_path):
    """empty_strided of 4 TiB recorded on "cpu" (or no device): replayed on meta, so it runs
    (no meta failure) and allocates nothing."""
    workload = capture_execution_trace(CORPUS / name, target_device="cpu")
    assert workload.strides["meta_failures"] == 0
    assert workload.strides["not_replayed"] == {}
    assert recorders == []


def test_a_parent_cycle_is_refused_naming_its_nodes(tmp_path):
    result = run_cli("--from-et", CORPUS / "parent_cycle.json", "-o", tmp_path / "s.json",
                     module=CAPTURE)
    assert result.returncode == 2
    assert "parent_cycle.json: the parent links (ctrl_deps) of nodes 2 -> 4 -> 3 -> 2 form a " \
           "cycle" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "s.json").exists()


def test_a_long_parent_cycle_is_found_without_recursion():
    nodes = [{"id": i, "name": "x", "ctrl_deps": i + 1 if i < 50_000 else 1}
             for i in range(1, 50_001)]
    with pytest.raises(TraceError, match=r"nodes 1 -> 2 -> .* \(50000 nodes\) form a cycle"):
        capture_execution_trace({"nodes": nodes}, source="long.json")


# --- the allow-list itself --------------------------------------------------------------------

def test_every_allow_listed_name_is_a_registered_aten_op_without_side_effects():
    missing = sorted(n for n in META_REPLAY_OPS if registered_overloads("aten", n) is None)
    assert missing == []
    for name in ("from_file", "save", "load", "_print", "manual_seed", "normal", "bernoulli",
                 "set_", "_nested_tensor_from_tensor_list", "record_stream", "item",
                 "_local_scalar_dense", "share_memory_", "wait"):
        assert name not in META_REPLAY_OPS, name


def test_only_meta_ops_touches_torch_ops_in_capture():
    """No other capture module looks an operator up by attribute (``torch.ops``, ``getattr``
    on an ops namespace): names from a trace reach the dispatcher only through ``meta_ops``."""
    folder = Path(capture_execution_trace.__code__.co_filename).parent.parent  # capture/
    users = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.py")
                   if "torch.ops" in p.read_text())
    assert users == ["meta_ops.py"]


@pytest.mark.parametrize("namespace, base, overload, allowed, why", [
    ("aten", "from_file", "default", (), "not on the layout replay's list"),
    ("aten", "relu", "__call__", (), "no overload '__call__'"),
    ("aten", "relu", "out.x", (), "no overload"),
    ("import_module", "__call__", "default", ("import_module",), "not a registered operator"),
    ("load_library", "x", "default", (), "namespace 'load_library' is not allowed"),
    ("os", "system", "default", ("os",), "not a registered operator"),
    ("torch.ops", "load_library", "default", ("torch.ops",), "not a registered operator"),
    ("aten", "view", "default", (), None),
])
def test_meta_operators_resolve_by_exact_registered_name_only(namespace, base, overload,
                                                              allowed, why):
    operator, reason = meta_operator(namespace, base, overload, allowed)
    if why is None:
        assert operator is torch.ops.aten.view.default and reason is None
    else:
        assert operator is None and why in reason


# --- bounded input --------------------------------------------------------------------------

def _trace_text(nodes=1) -> bytes:
    return json.dumps({"schema": "1.0.3", "nodes": [
        {"id": i, "name": "x", "ctrl_deps": 0, "attrs": []} for i in range(1, nodes + 1)]}
    ).encode()


def test_a_gzip_bomb_stops_at_the_cap_without_reading_it_whole(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as stream:
        stream.write(b'{"nodes": [' + b" " * (50 * 2**20) + b"]}")
    assert bomb.stat().st_size < 2**20 // 4
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match=r"bomb.json.gz: over the 1 MiB cap on a trace's "
                                             r"JSON text \(decompressed\); raise it with "
                                             r"--max-trace-bytes"):
            read_json(bomb, max_bytes=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # the cap and a chunk, never the 50 MB
    result = run_cli("--from-et", bomb, "-o", tmp_path / "s.json", "--max-trace-bytes", "1MiB",
                     module=CAPTURE)
    assert result.returncode == 2 and "over the 1 MiB cap" in result.stderr


def test_the_cap_can_be_raised_and_applies_to_plain_files(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_bytes(_trace_text(2000))
    with pytest.raises(TraceError, match="over the 1 KiB cap"):
        read_json(trace, max_bytes=1024)
    assert len(read_json(trace, max_bytes=10 * 2**20)["nodes"]) == 2000
    assert trace_io.MAX_TRACE_BYTES == 2 * 2**30  # the documented default


def _tar(path: Path, members) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_archive_members_are_capped_in_all(tmp_path):
    big = _tar(tmp_path / "big.tar.gz", [("trace.json", _trace_text(1) + b" " * (3 * 2**20))])
    with pytest.raises(TraceError, match="over the 1 MiB cap on a trace's archive members"):
        read_json(big, max_bytes=2**20)
    many = _tar(tmp_path / "many.tar.gz", [("a.txt", b"x" * 700_000), ("b.txt", b"x" * 700_000),
                                           ("trace.json", _trace_text(1))])
    with pytest.raises(TraceError, match="archive members"):
        read_json(many, max_bytes=2**20)
    assert read_json(many, max_bytes=2 * 2**20)["nodes"][0]["id"] == 1


def test_an_archive_of_too_many_members_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_io, "MAX_ARCHIVE_MEMBERS", 3)
    archive = _tar(tmp_path / "a.tar.gz", [(f"k{i}.txt", b"x") for i in range(5)])
    with pytest.raises(TraceError, match="the archive holds over 3 members"):
        read_json(archive)


def test_member_names_are_printed_escaped(tmp_path):
    archive = _tar(tmp_path / "a.tar.gz", [("\x1b[31mred.json", b"{nope")])
    with pytest.raises(TraceError) as caught:
        read_json(archive)
    assert "\x1b" not in str(caught.value) and "\\x1b[31mred.json" in str(caught.value)


@pytest.mark.parametrize("depth", [200_000, 150])
def test_deep_nesting_is_a_message_not_a_recursion_error(tmp_path, depth):
    trace = tmp_path / "deep.json"
    trace.write_text('{"nodes": ' + "[" * depth + "]" * depth + "}")
    result = run_cli("--from-et", trace, "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2, result.stderr
    assert f"{trace}: nested more than {trace_io.MAX_TRACE_DEPTH} levels deep" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--from-et", "--kineto"])
def test_a_fifo_is_refused_without_blocking(tmp_path, flag):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(json.load(open(CORPUS / "from_file.json"))))
    argv = ["--from-et", fifo] if flag == "--from-et" else ["--from-et", trace, "--kineto", fifo]
    result = run_cli(*argv, "-o", tmp_path / "s.json", module=CAPTURE, forked=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert f"{fifo}: is a FIFO, not a regular file" in result.stderr


def test_a_device_is_refused_without_reading_it(tmp_path):
    result = run_cli("--from-et", "/dev/zero", "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2
    assert "/dev/zero: is a device, not a regular file" in result.stderr
    result = run_cli("--from-et", CORPUS / "save.json", "--kineto", "/dev/zero", "-o",
                     tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2
    assert "/dev/zero: is a device, not a regular file" in result.stderr
    assert not (tmp_path / "s.json").exists()


def test_a_bad_size_flag_is_refused(tmp_path):
    result = run_cli("--from-et", CORPUS / "save.json", "-o", tmp_path / "s.json",
                     "--max-trace-bytes", "lots", module=CAPTURE)
    assert result.returncode == 2 and "cannot read 'lots' as a size" in result.stderr


# --- malformed traces and Kineto files ------------------------------------------------------

def _schema(name, args="Tensor self", returns="Tensor"):
    return f"aten::{name}({args}) -> {returns}"


def _node(node_id, name, schema, values, shapes, types, parent, outputs=(),
          output_shape=(2, 3)):
    attrs = [{"name": "rf_id", "type": "uint64", "value": node_id}]
    if schema:
        attrs.append({"name": "op_schema", "type": "string", "value": schema})
    return {"id": node_id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": values, "shapes": shapes, "types": types},
            "outputs": {"values": [list(o) for o in outputs],
                        "shapes": [list(output_shape)] * len(outputs),
                        "types": ["Tensor(float)"] * len(outputs)},
            "attrs": attrs}


def valid_trace():
    """A small no-strides trace: a step holding a transpose feeding mm (the layout replay runs),
    a cat of a list, an int argument; and a Kineto trace joined by record-function id."""
    a, b = [10, 10, 0, 6, 4, "cpu"], [11, 11, 0, 6, 4, "cpu"]
    t = [12, 11, 0, 6, 4, "cpu"]
    nodes = [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 0,
         "attrs": []},
        {"id": 2, "name": "ProfilerStep#1", "ctrl_deps": 1, "attrs": [
            {"name": "rf_id", "type": "uint64", "value": 2}]},
        _node(3, "aten::t", _schema("t", returns="Tensor(a)"), [b], [[2, 3]], ["Tensor(float)"],
              2, outputs=[t], output_shape=(3, 2)),
        _node(4, "aten::mm", _schema("mm", "Tensor self, Tensor mat2"), [a, t],
              [[2, 3], [3, 2]], ["Tensor(float)", "Tensor(float)"], 2,
              outputs=[[13, 13, 0, 4, 4, "cpu"]]),
        _node(5, "aten::cat", _schema("cat", "Tensor[] tensors, int dim=0"), [[a, b], 0],
              [[[2, 3], [2, 3]], []], ["GenericList[Tensor(float),Tensor(float)]", "Int"], 2,
              outputs=[[14, 14, 0, 12, 4, "cpu"]]),
        _node(6, "aten::add", _schema("add.Tensor", "Tensor self, Tensor other, *, Scalar "
                                                   "alpha=1"),
              [a, b, 1], [[2, 3], [2, 3], []], ["Tensor(float)", "Tensor(float)", "Int"], 2,
              outputs=[[15, 15, 0, 6, 4, "cpu"]]),
    ]
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
               "dur": 100, "pid": 1, "tid": 1, "args": {"Record function id": 2}}]
    for node in nodes[2:]:
        events.append({"ph": "X", "cat": "cpu_op", "name": node["name"], "ts": node["id"] * 10,
                       "dur": 5, "pid": 1, "tid": 1,
                       "args": {"Record function id": node["id"], "Input Dims": []}})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 41,
                   "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 7}})
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "ts": 50, "dur": 3, "pid": 0,
                   "tid": 7, "args": {"correlation": 7}})
    return {"schema": "1.0.3-chakra.0.0.4", "pid": 1, "nodes": nodes}, {"traceEvents": events}


def test_the_valid_trace_captures_with_recovered_layouts_and_times():
    trace, kineto = valid_trace()
    workload = capture_execution_trace(trace, kineto=kineto, target_device="cpu")
    assert workload.captured_calls == 4 and workload.strides["recovered_calls"] == 1
    assert workload.kineto["joined_calls"] == 4


def _set(path, value):
    def mutate(trace, kineto):
        document = kineto if path[0] == "traceEvents" else trace
        target = document
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return mutate


_DELETE = object()
MALFORMED = {
    "node_is_a_list": (_set(("nodes", 3), [1, 2]), "t.json: nodes[3]: is an array, not an object"),
    "id_missing": (_set(("nodes", 3, "id"), _DELETE), "nodes[3] (aten::mm): no id"),
    "id_is_a_string": (_set(("nodes", 3, "id"), "4"),
                       "nodes[3] (aten::mm): id is a string ('4'), not an integer"),
    "duplicate_id": (_set(("nodes", 3, "id"), 3),
                     "node 3 (aten::mm): id 3 is also the id of nodes[2]"),
    "name_is_an_int": (_set(("nodes", 3, "name"), 5),
                       "node 4: name is an integer (5), not a string"),
    "parent_is_a_list": (_set(("nodes", 3, "ctrl_deps"), [2]),
                         "node 4 (aten::mm): ctrl_deps (the parent's id) is an array"),
    "attrs_is_an_object": (_set(("nodes", 3, "attrs"), {"op_schema": "x"}),
                           "node 4 (aten::mm): attrs is an object, not an array"),
    "op_schema_is_an_int": (_set(("nodes", 3, "attrs", 1, "value"), 7),
                            "node 4 (aten::mm): attribute op_schema is an integer (7), not a "
                            "string"),
    "inputs_is_a_string": (_set(("nodes", 3, "inputs"), "x"),
                           "node 4 (aten::mm): inputs is a string ('x'), not an object"),
    "types_hold_an_int": (_set(("nodes", 3, "inputs", "types", 1), 3),
                          "node 4 (aten::mm): inputs.types[1] is an integer (3), not a string"),
    "values_is_an_object": (_set(("nodes", 3, "outputs", "values"), {}),
                            "node 4 (aten::mm): outputs.values is an object, not an array"),
    "kineto_dur_is_a_string": (_set(("traceEvents", 2, "dur"), "5"),
                               "k.json: traceEvents[2] (aten::mm): dur is a string ('5'), not "
                               "a finite number"),
    "kineto_ts_missing": (_set(("traceEvents", 2, "ts"), _DELETE),
                          "traceEvents[2] (aten::mm): no ts"),
    "kineto_name_is_an_int": (_set(("traceEvents", 2, "name"), 3),
                              "traceEvents[2]: name is an integer (3), not a string"),
    "kineto_args_is_a_list": (_set(("traceEvents", 2, "args"), []),
                              "traceEvents[2] (aten::mm): args is an array, not an object"),
    "kineto_event_is_a_string": (_set(("traceEvents", 1), "x"),
                                 "traceEvents[1]: is a string ('x'), not an object"),
    "kineto_correlation_is_text": (_set(("traceEvents", 5, "args", "correlation"), "7"),
                                   "traceEvents[5] (cudaLaunchKernel): args.correlation is a "
                                   "string ('7'), not an integer"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_traces_name_the_file_the_node_and_the_field(case, tmp_path):
    trace, kineto = valid_trace()
    mutate, message = MALFORMED[case]
    mutate(trace, kineto)
    (tmp_path / "t.json").write_text(json.dumps(trace))
    (tmp_path / "k.json").write_text(json.dumps(kineto))
    result = run_cli("--from-et", tmp_path / "t.json", "--kineto", tmp_path / "k.json",
                     "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "s.json").exists()


def test_odd_argument_values_leave_the_call_out_with_their_reason():
    trace, _ = valid_trace()
    trace["nodes"][4]["inputs"]["values"][1] = "zero"  # cat's dim recorded as text
    workload = capture_execution_trace(trace, target_device="cpu")
    reasons = [s.reason for s in workload.skipped]
    assert reasons == ["an Int argument recorded as a string ('zero')"]


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                          st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)


def _places(value, path=()):
    """Every (container path, key) in a document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield path, key
            yield from _places(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield path, index
            yield from _places(item, path + (index,))


def _with_strides(trace):
    """The same trace as schema 1.1.1 records it: strides beside shapes."""
    for node in trace["nodes"]:
        for side in ("inputs", "outputs"):
            if isinstance(node.get(side), dict):
                node[side]["strides"] = [[3, 1] if isinstance(shape, list) and len(shape) == 2
                                         and all(isinstance(d, int) for d in shape) else []
                                         for shape in node[side]["shapes"]]
    return trace


def _legacy(trace):
    """The same trace in the 1.0.x layout: inputs as a list beside input_shapes/input_types,
    the parent in ``parent``."""
    for node in trace["nodes"]:
        node["parent"] = node.pop("ctrl_deps")
        for side, prefix in (("inputs", "input"), ("outputs", "output")):
            if isinstance(node.get(side), dict):
                recorded = node.pop(side)
                node[side] = recorded["values"]
                node[f"{prefix}_shapes"] = recorded["shapes"]
                node[f"{prefix}_types"] = recorded["types"]
    return trace


_BASES = [valid_trace(), (_with_strides(valid_trace()[0]), valid_trace()[1]),
          (_legacy(valid_trace()[0]), valid_trace()[1])]
_PLACES = [(base, "trace") + p for base, (trace, _) in enumerate(_BASES)
           for p in _places(trace)] + [(0, "kineto") + p for p in _places(_BASES[0][1])]


@pytest.mark.parametrize("base", range(len(_BASES)))
def test_every_base_of_the_property_test_captures(base):
    trace, kineto = copy.deepcopy(_BASES[base])
    workload = capture_execution_trace(trace, kineto=kineto, target_device="cpu")
    assert workload.captured_calls == 4 and not workload.skipped


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(_BASES) - 1),
       st.lists(st.tuples(st.integers(0, len(_PLACES) - 1), st.booleans(), _JSON),
                min_size=1, max_size=4))
def test_no_mutation_of_a_valid_trace_raises_anything_but_trace_error(base, mutations):
    trace, kineto = copy.deepcopy(_BASES[base])
    documents = {"trace": trace, "kineto": kineto}
    for index, delete, value in mutations:
        which_base, which, path, key = _PLACES[index]
        if which_base != base and which == "trace":
            continue  # a place in another base's layout
        target = documents[which]
        try:
            for part in path:
                target = target[part]
            if delete and isinstance(target, dict):
                target.pop(key, None)
            else:
                target[key] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced this place's container
    try:
        workload = capture_execution_trace(trace, kineto=kineto, target_device="cpu")
    except TraceError as exc:
        assert str(exc).startswith("execution trace") or str(exc).startswith("Kineto trace")
        OUTCOMES["refused"] += 1
        return
    workload.report(workload.spec_and_notes(param_form=True)[1])
    workload.summary_lines()
    OUTCOMES["captured"] += 1


OUTCOMES = {"refused": 0, "captured": 0}


def test_the_mutation_test_both_refused_and_captured_mutated_traces():
    """The property test above is not vacuous: some mutations were refused, some captured."""
    if OUTCOMES == {"refused": 0, "captured": 0}:
        pytest.skip("the property test did not run in this process")
    assert OUTCOMES["refused"] > 0 and OUTCOMES["captured"] > 0, OUTCOMES


# --- outputs --------------------------------------------------------------------------------

@pytest.fixture
def trace_file(tmp_path):
    trace, kineto = valid_trace()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    (tmp_path / "k.json").write_text(json.dumps(kineto))
    return path


def test_the_output_is_never_the_input(trace_file, tmp_path):
    before = trace_file.read_bytes()
    for output, source in ((trace_file, "--from-et trace"), (tmp_path / "k.json",
                                                             "--kineto trace")):
        result = run_cli("--from-et", trace_file, "--kineto", tmp_path / "k.json", "-o", output,
                         module=CAPTURE)
        assert result.returncode == 2
        assert f"-o/--output {output} is the {source} file" in result.stderr
    assert trace_file.read_bytes() == before
    # the report's name is an output too: t.capture.json from -o t.json
    report_named_input = tmp_path / "x.capture.json"
    report_named_input.write_bytes(before)
    result = run_cli("--from-et", report_named_input, "-o", tmp_path / "x.json", module=CAPTURE)
    assert result.returncode == 2 and "report" in result.stderr and "is the --from-et" in \
        result.stderr
    assert report_named_input.read_bytes() == before


@pytest.mark.parametrize("planted", ["s.json", "s.capture.json"])
def test_outputs_through_planted_links_are_refused(trace_file, tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / planted).symlink_to(victim)
    result = run_cli("--from-et", trace_file, "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 2
    assert f"{tmp_path / planted}: is a symbolic link" in result.stderr
    assert victim.read_text() == "precious"


def test_outputs_replace_planted_hard_links_instead_of_writing_through(trace_file, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.link(victim, tmp_path / "s.capture.json")
    result = run_cli("--from-et", trace_file, "-o", tmp_path / "s.json", module=CAPTURE)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "precious"
    assert json.loads((tmp_path / "s.capture.json").read_text())["captured_calls"] == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_output_folder_is_made_where_missing(trace_file, tmp_path):
    result = run_cli("--from-et", trace_file, "-o", tmp_path / "new" / "s.json", module=CAPTURE)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "new" / "s.capture.json").exists()


def test_outputs_that_are_fifos_or_directories_are_refused(trace_file, tmp_path):
    os.mkfifo(tmp_path / "f.json")
    (tmp_path / "d.capture.json").mkdir()
    result = run_cli("--from-et", trace_file, "-o", tmp_path / "f.json", module=CAPTURE)
    assert result.returncode == 2 and "is not a regular file" in result.stderr
    result = run_cli("--from-et", trace_file, "-o", tmp_path / "d.json", module=CAPTURE)
    assert result.returncode == 2 and "report" in result.stderr and "is a directory" in \
        result.stderr


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=400), st.sampled_from(["plain", "gzip", "tar"]))
def test_any_bytes_read_as_a_trace_give_json_or_trace_error(tmp_path_factory, data, wrapping):
    path = tmp_path_factory.mktemp("bytes") / "t.json"
    if wrapping == "gzip":
        data = gzip.compress(data)
    elif wrapping == "tar":
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            info = tarfile.TarInfo("t.json")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        data = buffer.getvalue()[:len(buffer.getvalue()) - len(data) % 7]  # often truncated
    path.write_bytes(data)
    try:
        read_json(path, max_bytes=300)
    except TraceError as exc:
        assert str(exc).startswith(str(path))


def test_run_checks_its_outputs_before_importing_anything(tmp_path):
    _plant(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "s.json").symlink_to(victim)
    result = run_cli("--run", f"{MARKER_MODULE}:step", "-o", tmp_path / "s.json",
                     module=CAPTURE, cwd=tmp_path)
    assert result.returncode == 2 and "is a symbolic link" in result.stderr
    assert not (tmp_path / "IMPORT_MARKER").exists() and victim.read_text() == "precious"

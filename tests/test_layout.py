"""The package's shape: no import cycles, torch-free planning, modules that say their one job.

Imports are read from the source (every ``import``/``from ... import`` anywhere in a module,
inside functions included, relative or absolute), not observed at run time, so an import cycle
hidden in a function that tests never call is still found.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Set

import pytest

from conftest import EXAMPLES, REPO

PACKAGE = REPO / "param_compute"
#: An alarm, not a design rule: a module is one concept, whatever its length; one past this
#: many lines has most likely grown a second concept.
MAX_LINES = 800


def _modules() -> Dict[str, Path]:
    """Dotted module name -> file, for every module of the package (``__init__`` as the package)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(name: str, path: Path, modules: Dict[str, Path]) -> Set[str]:
    """The package modules ``name`` imports: ``import a.b`` imports ``a.b``; ``from a import x``
    imports the submodule ``a.x`` where there is one, else ``a`` itself. A module that does not
    exist (outside the package, or not written yet) is no edge."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                if f"{module}.{alias.name}" in modules:
                    found.add(f"{module}.{alias.name}")
                elif module in modules:
                    found.add(module)
    found.discard(name)
    return found


def import_graph() -> Dict[str, Set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _cycle_path(graph: Dict[str, Set[str]], component: List[str]) -> str:
    """One concrete loop through a component: ``a -> b -> c -> a``."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        following = sorted(graph[path[-1]] & members)
        if start in following and len(path) > 1:
            return " -> ".join(path + [start])
        fresh = [m for m in following if m not in seen]
        if not fresh:  # close the loop at the first module seen again
            again = following[0]
            return " -> ".join(path[path.index(again):] + [again])
        path.append(fresh[0])
        seen.add(fresh[0])


def test_cycle_finder_sees_function_level_and_relative_imports(tmp_path):
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert _cycle_path(graph, ["p.a", "p.b", "p.c"]) == "p.a -> p.b -> p.c -> p.a"
    package = tmp_path / "param_compute"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""p."""\n')
    (package / "sub" / "__init__.py").write_text('"""s."""\n')
    (package / "sub" / "one.py").write_text(
        "import os\nfrom param_compute.sub.later import x\n\ndef f():\n    from .two import g\n")
    (package / "sub" / "two.py").write_text("from param_compute.sub import one\n")
    modules = {"param_compute": package / "__init__.py",
               "param_compute.sub": package / "sub" / "__init__.py",
               "param_compute.sub.one": package / "sub" / "one.py",
               "param_compute.sub.two": package / "sub" / "two.py"}
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert graph["param_compute.sub.one"] == {"param_compute.sub.two"}
    assert graph["param_compute.sub.two"] == {"param_compute.sub.one"}
    assert cycles(graph) == [["param_compute.sub.one", "param_compute.sub.two"]]


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50  # the scan found the package
    found = [_cycle_path(graph, component) for component in cycles(graph)]
    assert not found, "import cycles (function-level imports included):\n  " + "\n  ".join(found)


def _stage(module: str) -> str:
    """The subpackage a module belongs to (``param_compute.runtime.engine`` -> ``runtime``), or
    the module itself for the shared leaves and entry modules at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_stages_never_reach_back_up():
    """Between subpackages the imports form no cycle either: a stage uses the ones before it
    (and the shared leaves), never one after it. ``python -m`` entry modules (``__main__``) are
    front doors into ``cli``, not part of their package's code."""
    graph: Dict[str, Set[str]] = {}
    for module, imported in import_graph().items():
        if module.endswith(".__main__"):
            continue
        stage = _stage(module)
        graph.setdefault(stage, set()).update(
            _stage(other) for other in imported if _stage(other) != stage)
    found = [_cycle_path(graph, component) for component in cycles(graph)]
    assert not found, "stages importing each other:\n  " + "\n  ".join(found)
    assert "runtime" not in graph["results"] | graph["plugins"] | graph["spec"]
    assert "profiling" not in graph["runtime"] and "plan" not in graph["plugins"]
    # Capture writes specs and step files; the run side only reads them (spec.step_file).
    assert "capture" not in graph["runtime"] | graph["measure"] | graph["data"]
    # The measuring core times whatever it is given: it knows nothing of runs or captures.
    assert not graph["measure"] & {"runtime", "capture", "pipeline", "analysis", "cli"}
    # Live sinks never reach into the offline tools.
    assert "analysis" not in graph["results"] | graph["runtime"]


def _python(code: str, cwd: Path = REPO, args=(), env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})


def test_spec_plan_and_plugin_tables_import_without_torch():
    result = _python("""
        import sys
        import param_compute.spec, param_compute.plan
        import param_compute.spec.loader, param_compute.spec.semantic, param_compute.spec.schema
        import param_compute.plan.iterators, param_compute.plan.runplan, param_compute.plan.summary
        import param_compute.plugins.registry, param_compute.plugins.loading
        import param_compute.runtime.engine, param_compute.runtime.toolchain
        import param_compute.runtime.toolchain, param_compute.runtime.context
        loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        print(loaded[:5])
        assert not loaded
    """)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dry_run_imports_no_torch_once_the_operator_name_index_exists(tmp_path):
    """A dry run plans without torch: the engine, the plugin loading, the data generators'
    registration and, with the operator-name index the first dry run writes
    (``operators.name_index``), validation never import it."""
    code = f"""
        import sys
        from param_compute.cli.run_benchmark import main
        status = main(["-c", {str(EXAMPLES / "simple_add.json")!r}, "--dry-run",
                       "--no-progress", "--output", sys.argv[1]])
        assert status == 0, status
        print("TORCH", "torch" in sys.modules)
    """
    index = tmp_path / "index"
    env = {"PARAM_COMPUTE_NAME_INDEX_DIR": str(index)}
    first = _python(code, args=[str(tmp_path / "first.json")], env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(list(index.glob("operator_names-*.json"))) == 1  # written at first use
    second = _python(code, args=[str(tmp_path / "r.json")], env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "TORCH False" in second.stdout
    assert (tmp_path / "r.json").read_text().count('"dry-run"') == 1


def test_modules_say_their_job_and_stay_under_the_alarm():
    too_long, undocumented = [], []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_LINES:
            too_long.append(f"{path.relative_to(REPO)}: {lines} lines")
        docstring = ast.get_docstring(ast.parse(text))
        if not docstring or not docstring.strip().splitlines()[0].strip():
            undocumented.append(str(path.relative_to(REPO)))
    assert not too_long, f"modules over {MAX_LINES} lines:\n  " + "\n  ".join(too_long)
    assert not undocumented, "modules without a docstring:\n  " + "\n  ".join(undocumented)


@pytest.mark.parametrize("name", ["param_compute.runtime.executor",
                                  "param_compute.runtime.isolation",
                                  "param_compute.profiling.batch_child"])
def test_executors_are_given_a_context_not_the_engine(name):
    """Stages don't reach back up: nothing builds an executor from the engine or a stand-in."""
    source = _modules()[name].read_text(encoding="utf-8")
    assert "SimpleNamespace" not in source
    assert "Executor(self" not in source and "engine." not in source

"""The wheel carries every subpackage, and every documented tool starts from it outside the checkout."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

#: What the README documents as ``python -m param_compute.X``; each must start from a wheel.
README_TOOLS = sorted(set(re.findall(r"python -m (param_compute(?:\.\w+)+)",
                                     (REPO / "README.md").read_text())))

# One interpreter runs every tool's --help (each in a fresh module namespace) and says where the
# package came from, so the test proves the installed copy ran, not the checkout.
PROBE = r"""
import json, runpy, sys, io, contextlib
import param_compute
results = {"package": param_compute.__file__}
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException as exc:
        code, out = f"{type(exc).__name__}: {exc}", out
    results[name] = [code, out.getvalue()[:300]]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the sources (no build output in the checkout) and unpack it
    into a folder of its own: what ``pip install .`` puts into site-packages."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("setup.py", "README.md", "requirements.txt"):
        shutil.copy2(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("param_compute", "workloads"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(work / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "No module named" in built.stderr:
        pytest.skip(f"cannot build a wheel here: {built.stderr.strip()[-200:]}")
    assert built.returncode == 0, built.stderr
    (wheel,) = (work / "dist").glob("param_compute-*.whl")
    site = work / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def test_wheel_carries_every_package_and_the_schema(installed_wheel):
    source_packages = {str(init.parent.relative_to(REPO)).replace("/", ".")
                       for init in (REPO / "param_compute").rglob("__init__.py")}
    source_packages |= {".".join(("param_compute", "workloads",
                                  *init.parent.relative_to(REPO / "workloads").parts))
                        for init in (REPO / "workloads").rglob("__init__.py")}
    installed = {str(init.parent.relative_to(installed_wheel)).replace("/", ".")
                 for init in installed_wheel.rglob("__init__.py")}
    assert source_packages - installed == set()
    assert "param_compute.capture" in installed and "param_compute.workloads.pytorch" in installed
    assert not (installed_wheel / "workloads").exists()  # never a top-level `workloads` package
    assert (installed_wheel / "param_compute" / "spec" / "spec.schema.json").is_file()


def test_every_documented_tool_starts_from_the_wheel(installed_wheel, tmp_path):
    assert "param_compute.run_benchmark" in README_TOOLS and len(README_TOOLS) >= 8
    env = {"PYTHONPATH": str(installed_wheel), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "PYTHONNOUSERSITE": "1"}
    probe = subprocess.run([sys.executable, "-c", PROBE, *README_TOOLS], capture_output=True,
                           text=True, timeout=600, cwd=tmp_path, env=env)
    assert probe.returncode == 0, probe.stderr[-2000:]
    results = json.loads(probe.stdout.splitlines()[-1])
    assert results.pop("package").startswith(str(installed_wheel))
    failed = {name: outcome for name, outcome in results.items() if outcome[0] != 0}
    assert failed == {}
    assert all("usage:" in text for _, text in results.values())


# The console script as pip's launcher starts it: the entry point found through the installed
# distribution's metadata, loaded and called, its return value the exit status.
CONSOLE_SCRIPT = r"""
import sys
from importlib.metadata import entry_points
(script,) = [e for e in entry_points(group="console_scripts") if e.name == "param-compute"]
import param_compute
print("PACKAGE", param_compute.__file__, file=sys.stderr)
sys.argv = ["param-compute", *sys.argv[1:]]
sys.exit(script.load()())
"""


def test_the_wheel_installs_the_param_compute_command(installed_wheel, tmp_path):
    (entry_points,) = installed_wheel.glob("param_compute-*.dist-info/entry_points.txt")
    assert "param-compute = param_compute.cli.main:main" in entry_points.read_text()
    env = {"PYTHONPATH": str(installed_wheel), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "PYTHONNOUSERSITE": "1"}
    for args, first in ((["--help"], "usage: param-compute COMMAND"),
                        (["run", "--help"], "usage: param-compute run "),
                        (["history", "show", "--help"], "usage: param-compute history show ")):
        done = subprocess.run([sys.executable, "-c", CONSOLE_SCRIPT, *args], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith(first), done.stdout[:300]
        assert f"PACKAGE {installed_wheel}" in done.stderr  # the installed copy ran

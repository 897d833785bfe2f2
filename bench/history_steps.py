#!/usr/bin/env python
"""Results history: six runs c1..c6 where one config gets 20% slower from c4 on.

A plugin op sleeps for its ``seconds`` argument, 20% longer for the config whose ``tag`` is in
``$HISTORY_BENCH_SLOW_TAG``; a spec of three configs (tags 1, 2, 3) runs six times, labelled
c1..c6, the variable set from c4 on. ``history check --fail-on-regression 10`` must exit 1
naming ``test.nap|1|0|0`` (tag 2) at c4 and nothing else; the same six runs without the
slowdown must exit 0. Beside it, the reference: the pairwise gate (``compare c3 c4
--fail-on-regression 10``), which sees the same config from one pair of files.

    python bench/history_steps.py [--rounds 3]

Exit status: 0 every round right, 1 a wrong verdict.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import param_compute  # noqa: E402
from param_compute.cli.history import main as history  # noqa: E402
from param_compute.analysis.compare import main as compare  # noqa: E402

NAP = textwrap.dedent("""
    import os
    import time
    from param_compute import OperatorInterface, register_operator

    class Nap(OperatorInterface):
        def forward(self, seconds, tag):
            slow = os.environ.get("HISTORY_BENCH_SLOW_TAG")
            time.sleep(seconds * (1.2 if slow is not None and int(slow) == tag else 1.0))

    register_operator("test.nap", Nap)
""")
SPEC = {"test.nap": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
    {"input": [{"args": [{"type": "float", "value": 0.002}, {"type": "int", "value": tag}]}]}
    for tag in (1, 2, 3)]}}


def _captured(function, argv):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = function(argv)
    return code, out.getvalue()


def _six_runs(work: Path, plugins: Path, slow: bool) -> Path:
    db = work / f"history-{'slow' if slow else 'steady'}.db"
    for index in range(1, 7):
        if slow and index >= 4:
            os.environ["HISTORY_BENCH_SLOW_TAG"] = "2"
        else:
            os.environ.pop("HISTORY_BENCH_SLOW_TAG", None)
        out = work / f"c{index}-{'slow' if slow else 'steady'}.json"
        param_compute.run(SPEC, workloads_dirs=[plugins], output=out, warmup=1, iteration=15,
                          num_threads=1)
        code, text = _captured(history, ["add", str(out), "--label", f"c{index}", "--db",
                                         str(db)])
        assert code == 0, text
    os.environ.pop("HISTORY_BENCH_SLOW_TAG", None)
    return db


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="history-steps-"))
    plugins = work / "plugins"
    plugins.mkdir()
    (plugins / "nap.py").write_text(NAP)
    print("| round | history | exit | regressions named | reference compare c3 c4 | right |")
    print("| --- | --- | ---: | --- | --- | --- |")
    wrong = 0
    for round_index in range(1, args.rounds + 1):
        for slow in (True, False):
            (work / f"r{round_index}").mkdir(exist_ok=True)
            db = _six_runs(work / f"r{round_index}", plugins, slow)
            code, text = _captured(history, ["check", "--fail-on-regression", "10", "--db",
                                             str(db)])
            named = [line.split(": ", 1)[1] for line in text.splitlines()
                     if line.startswith("regression:")]
            tag = "slow" if slow else "steady"
            pair = [str(work / f"r{round_index}" / f"c{i}-{tag}.json") for i in (3, 4)]
            ref_code, _ = _captured(compare, [*pair, "--fail-on-regression", "10"])
            if slow:
                right = code == 1 and len(named) == 1 and named[0].startswith(
                    "test.nap|1|0|0 ") and " at c4 (" in named[0]
            else:
                right = code == 0 and not named
            wrong += not right
            shown = "; ".join(n.split(" on ")[0] + " " + n.rsplit(": ", 1)[-1]
                              for n in named).replace("|", "\\|")  # a Markdown table cell
            print(f"| {round_index} | {'20% slower from c4' if slow else 'steady'} | {code} | "
                  f"{shown or '-'} | exit {ref_code} | {'yes' if right else 'NO'} |")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

"""``param-compute COMMAND ...``: the one command; each subcommand is one tool's ``main``.

``param-compute --help`` lists the commands; ``param-compute help COMMAND`` and ``param-compute
COMMAND --help`` give one's flags. Each command is also reached as ``python -m param_compute.X``
(PARAM's door: ``run`` is ``run_benchmark``), through :func:`door`, into the same ``main``; a
command's usage names the door it was started by. A command's module is imported only when it
runs, so listing the commands imports neither torch nor any tool.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional

from param_compute.errors import EXIT_INVALID
from param_compute.process.entry import run

PROG = "param-compute"


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, the module whose ``main(argv, prog)`` it runs, its ``python -m``
    door and one line of help."""

    name: str
    module: str
    door: str
    summary: str

    def main(self) -> Callable[..., Optional[int]]:
        return importlib.import_module(self.module).main


COMMANDS = (
    Command("run", "param_compute.cli.run_benchmark", "param_compute.run_benchmark",
            "replay a JSON spec: validate, expand, time each run, write results"),
    Command("batch", "param_compute.profiling.batch_child", "param_compute.run_batch",
            "replay one batch file of runs (PARAM's run_batch; --ncu/--nsys children)"),
    Command("capture", "param_compute.cli.capture", "param_compute.capture",
            "an execution trace or a live step -> a replayable spec"),
    Command("compare", "param_compute.analysis.compare", "param_compute.compare",
            "two results files run by run: speedup, significance, a regression gate"),
    Command("merge", "param_compute.analysis.merge", "param_compute.merge",
            "the shards of a sharded run -> one results file"),
    Command("report", "param_compute.analysis.report", "param_compute.report",
            "a results file -> an HTML page of plots"),
    Command("totals", "param_compute.analysis.workload_totals",
            "param_compute.workload_totals",
            "a captured workload's replayed time per op beside the original's"),
    Command("history", "param_compute.cli.history", "param_compute.history",
            "runs kept in a database: series, steps, a regression gate, a dashboard"),
    Command("ab", "param_compute.cli.ab", "param_compute.ab",
            "two setups on one spec, their processes alternated in ABBA rounds"),
    Command("calibrate", "param_compute.measure.calibrate", "param_compute.calibrate",
            "measure this machine's peak FLOP/s and memory bandwidth"),
    Command("export", "param_compute.results.sinks.export", "param_compute.exporters",
            "a results file -> CSV or PyTorch OSS benchmark-database JSON"),
    Command("ncu", "param_compute.profiling.ncu_report", "param_compute.tools.ncu_report",
            "the Nsight Compute profiles of a --ncu run, joined to run ids"),
    Command("nsys", "param_compute.profiling.nsys_report", "param_compute.tools.nsys_report",
            "the Nsight Systems reports of a --nsys run, joined to run ids"),
)
BY_NAME = {command.name: command for command in COMMANDS}
BY_DOOR = {command.door: command for command in COMMANDS}


def usage() -> str:
    """``param-compute --help``: the commands, one line each, and their ``python -m`` doors."""
    room = max(len(command.name) for command in COMMANDS)
    lines = [f"usage: {PROG} COMMAND [ARGS...]", "",
             "PyTorch operator benchmarks replayed from JSON specs (PARAM-compatible).", "",
             "commands:"]
    lines += [f"  {command.name:<{room}}  {command.summary}" for command in COMMANDS]
    lines += ["", f"'{PROG} help COMMAND' or '{PROG} COMMAND --help': a command's flags.",
              "Each command is also 'python -m param_compute.X', as PARAM's scripts call it:"]
    lines += [f"  {command.name:<{room}}  python -m {command.door}" for command in COMMANDS]
    return "\n".join(lines)


def _unknown(name: str) -> int:
    close = difflib.get_close_matches(name, BY_NAME, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    print(f"usage: {PROG} COMMAND [ARGS...]\n{PROG}: error: unknown command {name!r}{hint}; "
          f"'{PROG} --help' lists them", file=sys.stderr)
    return EXIT_INVALID


def dispatch(argv: List[str]) -> Optional[int]:
    """Run ``param-compute ARGV``: its exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_INVALID
    if argv[0] == "--version":
        from param_compute.lib import __version__

        print(f"param_compute {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name == "help":
        if not rest:
            print(usage())
            return 0
        name, rest = rest[0], ["--help"]
    command = BY_NAME.get(name)
    if command is None:
        return _unknown(name)
    return command.main()(rest, prog=f"{PROG} {command.name}")


def main(argv: Optional[List[str]] = None) -> Optional[int]:
    """The ``param-compute`` console script (and ``python -m param_compute``)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return run(lambda: dispatch(arguments))


def door(module: str) -> None:
    """``python -m MODULE``: its command's ``main`` with the door's own usage line, through
    ``process.entry.run`` (a reader that leaves is no error); exits the process."""
    command = BY_DOOR[module]
    sys.exit(run(lambda: command.main()(sys.argv[1:], prog=f"python -m {module}")))

"""``python -m param_compute.ab -c SPEC --a "ARGS" --b "ARGS" -o DIR``: two setups compared in one
command, their processes alternated in ABBA rounds.

Each side is ``run_benchmark`` with its ARGS (checked by ``run_benchmark``'s own parser before
anything runs) on the same spec, configs and seed; ``--python-a``/``--python-b`` run a side under
another interpreter (another virtualenv: another torch), with this param_compute first on its
``PYTHONPATH`` so both sides replay with the same code. Odd rounds run A then B, even rounds B
then A (``--rounds 4``, the default: A B B A A B B A), so drift over time falls on both sides
alike; ``compare`` judges a change between the sides' processes as well as their samples
(``analysis.comparison``), so fewer than 4 rounds can never call one significant. Each process writes ``DIR/rounds/a1.json``...; the rounds of a side are joined
(``analysis.rounds``) into ``DIR/a.json`` and ``DIR/b.json``, ordinary results files; the compare
table (``analysis.compare``, B against A, settings allowed to differ) is printed.

Each side's process is the leader of a process group ab owns (``process.group``): a Ctrl-C,
SIGTERM or SIGHUP sent to ab is passed on to the running side, which writes its finish line
(``GRACE_S`` seconds at most, then its group is killed), and nothing a side started outlives
ab. ``--timeout S`` stops a side that runs longer than S seconds the same way (SIGTERM).

Exit status: 0 both sides measured; 1 a side's process failed (a signal killed it: named, its
round kept as far as it got), ran past ``--timeout``, or some run failed; 2 bad arguments (an
unknown flag in ARGS, a flag that ab sets itself, a missing interpreter or spec, an output that
is a link or the spec, ``--alpha`` outside (0, 1) as ``compare`` refuses it); 128 + N
interrupted by signal N (130 where a side's process was interrupted by someone else): the round
files already written stay in ``DIR/rounds``.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from param_compute.errors import EXIT_INVALID, EXIT_OK, EXIT_RUN_FAILED, OptionsError
from param_compute.results.file import ResultsFileError
from param_compute.files import check_outputs
from param_compute.formatting import printable
from param_compute.process.group import signal_name
from param_compute import terminal
from param_compute.terminal import add_quiet

#: run_benchmark flags (their ``dest``) a side may not set: ab sets them, or they change where
#: results go or what is measured on one side only.
RESERVED = {
    "config": "-c/--config (give the spec to ab)",
    "output_prefix": "-o/--output-prefix (ab writes DIR/a.json and DIR/b.json)",
    "output": "--output (ab writes DIR/a.json and DIR/b.json)",
    "append": "-a/--append (ab writes DIR/a.json and DIR/b.json)",
    "resume": "--resume (ab writes DIR/a.json and DIR/b.json)",
    "resume_mixed": "--resume-mixed (ab writes DIR/a.json and DIR/b.json)",
    "csv": "--csv (ab writes DIR/a.json and DIR/b.json)",
    "oss_json": "--oss-json (ab writes DIR/a.json and DIR/b.json)",
    "shard": "--shard (both sides run every config)",
    "seed": "--seed (both sides use ab's --seed)",
    "only": "--only (give it to ab: both sides run the same configs)",
    "keywords": "-k (give it to ab: both sides run the same configs)",
    "input_ids": "--input-id (give it to ab: both sides run the same configs)",
    "resume_id": "-r/--resume-id (both sides run the same configs)",
    "stop_id": "-s/--stop-id (both sides run the same configs)",
    "dry_run": "--dry-run (ab measures)",
    "list_ops": "--list-ops", "explain": "--explain", "version": "--version",
    "profile": "-p/--profile (traces go beside a results file ab names)",
    "execution_trace": "--et (traces go beside a results file ab names)",
    "ncu": "--ncu", "nsys": "--nsys",
}


#: The exit statuses of a run_benchmark stopped by SIGINT or SIGTERM.
INTERRUPTED = (130, 143)
#: Seconds a side's process has to write its finish line once stopped, before it is killed.
GRACE_S = 10.0


class Stopped(Exception):
    """ab itself was stopped by a signal while a side ran (passed on to the side)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class AbError(ValueError):
    """Bad arguments to ab; the message says which and why."""

    status = EXIT_INVALID


class SideFailed(AbError):
    """A side's process ended without its results (a crash, an interpreter that is not one):
    exit 1, as a failed run; the rounds before it stay in ``DIR/rounds``."""

    status = EXIT_RUN_FAILED


def _refuse(message: str) -> None:
    raise AbError(message)


def side_args(text: str, side: str) -> List[str]:
    """The side's ARGS split as a shell would, checked by run_benchmark's parser."""
    from param_compute.cli.run_benchmark import build_parser

    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise AbError(f"--{side} {text!r}: {exc}") from None
    from param_compute.cli.run_benchmark import options_from_args

    if {"-h", "--help"} & set(args):
        raise AbError(f"--{side} {text!r}: -h/--help is not a side's flag")
    checker = build_parser()
    checker.error = _refuse  # type: ignore[method-assign]  # reported, never an exit
    try:
        parsed = checker.parse_args(args)
        given, defaults = vars(parsed), vars(checker.parse_args([]))
        for dest, what in RESERVED.items():
            if given.get(dest) != defaults.get(dest):
                raise AbError(f"{what} is not allowed in a side's ARGS")
        options_from_args(parsed)  # values checked as the run will check them
    except (AbError, OptionsError) as exc:
        raise AbError(f"--{side} {text!r}: {exc}") from None
    return args


def build_parser(prog: str = "python -m param_compute.ab") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Compare two setups (flags, interpreters) on one spec: their processes "
                    "alternate in ABBA rounds; prints the compare table of B against A.")
    p.add_argument("-c", "--config", type=Path, required=True, help="the spec file (JSON)")
    p.add_argument("--a", default="", metavar="ARGS", help="run_benchmark flags of side A")
    p.add_argument("--b", default="", metavar="ARGS", help="run_benchmark flags of side B")
    p.add_argument("-o", "--output-dir", type=Path, required=True, metavar="DIR",
                   help="writes DIR/a.json, DIR/b.json and DIR/rounds/")
    p.add_argument("--rounds", type=int, default=4, metavar="N",
                   help="rounds, each one process per side, A first in odd rounds and B first "
                        "in even ones (default 4: A B B A A B B A); a change is significant "
                        "only between the sides' processes too, so fewer than 4 never is")
    p.add_argument("--python-a", metavar="PY",
                   help="interpreter of side A (default this one)")
    p.add_argument("--python-b", metavar="PY",
                   help="interpreter of side B (default this one)")
    p.add_argument("--seed", type=int, default=0, help="data seed of both sides (default 0)")
    p.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="run filter of both sides (repeatable)")
    p.add_argument("-k", action="append", default=[], dest="keywords", metavar="EXPR",
                   help="run filter of both sides (repeatable)")
    p.add_argument("--input-id", action="append", default=[], dest="input_ids", metavar="ID",
                   help="run filter of both sides (repeatable)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level, between 0 and 1 (default 0.05)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="the most one side's process may run; past it the side is stopped "
                        "(SIGTERM, then SIGKILL) and ab ends, exit 1 (default: no limit)")
    p.add_argument("--max-rows", type=int, default=60, help="compare table rows (60)")
    add_quiet(p)
    return p


def _check(args: argparse.Namespace) -> Dict[str, List[str]]:
    if args.rounds < 1:
        raise AbError(f"--rounds must be >= 1, got {args.rounds}")
    if not 0 < args.alpha < 1:  # compare's rule (NaN fails it too)
        raise AbError(f"--alpha must be between 0 and 1, got {args.alpha}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise AbError(f"--timeout must be a number of seconds > 0, got {args.timeout}")
    if not args.config.is_file():
        raise AbError(f"-c {args.config}: " + ("not a regular file" if args.config.exists()
                                                else "no such file"))
    for side in ("a", "b"):
        python = getattr(args, f"python_{side}")
        if python is None:  # this interpreter (not the parser's default: the help is shared)
            python = sys.executable
            setattr(args, f"python_{side}", python)
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise AbError(f"--python-{side} {python}: not an executable file")
    return {side: side_args(getattr(args, side), side) for side in ("a", "b")}


def round_plan(rounds: int) -> List[tuple]:
    """(side, round number 1..N) in the order the processes run: AB, BA, AB..."""
    out = []
    for index in range(rounds):
        sides = ("a", "b") if index % 2 == 0 else ("b", "a")
        out += [(side, index + 1) for side in sides]
    return out


def _common(args: argparse.Namespace) -> List[str]:
    out = ["--seed", str(args.seed), "--no-progress"]
    for flag, values in (("--only", args.only), ("-k", args.keywords),
                         ("--input-id", args.input_ids)):
        for value in values:
            out += [flag, value]
    return out


def _run_side(python: str, spec: Path, args: Sequence[str], out: Path,
              timeout: Optional[float] = None):
    """One side's process, the leader of a process group of its own (``process.group``): its
    outcome, and the last of its standard error."""
    from param_compute.process.group import Tail, package_env, run_grouped

    command = [python, "-m", "param_compute.run_benchmark", "-c", str(spec), *args,
               "--output", str(out)]
    stderr = Tail()
    outcome = run_grouped(command, env=package_env(), stdout=Tail(1024), stderr=stderr,
                          timeout_s=timeout, grace_s=GRACE_S)
    return outcome, stderr.text()


def _outputs(args: argparse.Namespace) -> Dict[str, Path]:
    """``DIR/a.json``, ``DIR/b.json`` and the round files, checked before any process runs
    (never through a link, never onto the spec; ``DIR/rounds`` a directory of its own)."""
    files = {side: args.output_dir / f"{side}.json" for side in ("a", "b")}
    rounds = args.output_dir / "rounds"
    if rounds.is_symlink() or (rounds.exists() and not rounds.is_dir()):
        raise AbError(f"{rounds}: is a symbolic link or no directory (ab writes its round "
                      "files there); remove it or choose another -o DIR")
    outputs = {f"side {side.upper()}'s results": files[side] for side in files}
    outputs.update({f"side {side.upper()}'s round {number}": rounds / f"{side}{number}.json"
                    for side, number in round_plan(args.rounds)})
    try:
        check_outputs(outputs, {"spec": args.config})
    except OptionsError as exc:
        raise AbError(str(exc)) from None
    return files


def _run_rounds(args: argparse.Namespace, sides: Dict[str, List[str]]):
    """Every process of every round, in ABBA order: each side's round files, and the exit
    status (``EXIT_RUN_FAILED`` where some runs failed)."""
    rounds_dir = args.output_dir / "rounds"
    rounds_dir.mkdir(parents=True, exist_ok=True)
    status = EXIT_OK
    paths: Dict[str, List[Path]] = {"a": [], "b": []}
    for side, number in round_plan(args.rounds):
        out = rounds_dir / f"{side}{number}.json"
        out.unlink(missing_ok=True)
        if not args.quiet:
            print(f"round {number}: side {side.upper()}", file=sys.stderr, flush=True)
        outcome, stderr = _run_side(getattr(args, f"python_{side}"), args.config,
                                    [*sides[side], *_common(args)], out, args.timeout)
        if not _judged(args, f"side {side.upper()}'s round {number}", outcome, stderr, out):
            status = EXIT_RUN_FAILED
        paths[side].append(out)
    return paths, status


def _judged(args: argparse.Namespace, which: str, outcome, stderr: str, out: Path) -> bool:
    """Whether a side's process measured all it had to (False: some runs failed, or a signal
    killed it after it wrote results, which are kept); raises where ab must stop: ``Stopped``
    (ab was), ``KeyboardInterrupt`` (the side was, by someone else), ``SideFailed`` (past
    ``--timeout``, or no results), ``AbError`` (the side refused its arguments)."""
    code = outcome.returncode
    if outcome.signum is not None:  # ab was stopped: so was the side
        raise Stopped(outcome.signum)
    if outcome.timed_out:
        raise SideFailed(f"{which} ran past --timeout {args.timeout:g} s: stopped; the rounds "
                         f"measured so far are in {out.parent} (not joined, not compared)")
    if code in INTERRUPTED or -code in (signal.SIGINT, signal.SIGTERM):
        # a side stopped by SIGINT/SIGTERM (not through ab): so is ab
        print(f"{which} was interrupted (" + (f"exit {code}" if code > 0 else
                                              f"killed by {signal_name(-code)}") + ")",
              file=sys.stderr)
        raise KeyboardInterrupt
    tail = " / ".join(printable(line, 300) for line in stderr.strip().splitlines()[-5:])
    how = f"was killed by {signal_name(-code)}" if code < 0 else f"exited {code}"
    if code == EXIT_INVALID or not out.is_file():
        failed = AbError if code == EXIT_INVALID else SideFailed
        raise failed(f"{which} {how} without results: {tail or 'no output'}")
    if code != EXIT_OK:
        print(f"{which} {how}: " + ("its results are kept as far as they go" if code < 0
                                    else "some runs failed"), file=sys.stderr)
    return code == EXIT_OK


def run_ab(args: argparse.Namespace, console) -> int:
    from param_compute.analysis.compare import render
    from param_compute.analysis.comparison import compare_files
    from param_compute.analysis.rounds import join_rounds

    sides = _check(args)
    files = _outputs(args)
    for earlier in files.values():  # an earlier ab's pair must not pass for this one's
        earlier.unlink(missing_ok=True)  # (checked: a regular file or none, never a link)
    paths, status = _run_rounds(args, sides)
    for side in ("a", "b"):
        join_rounds(paths[side], files[side], {"ab": {
            "side": side, "args": sides[side], "python": getattr(args, f"python_{side}"),
            "rounds": [str(p.name) for p in paths[side]]}})
    report = compare_files(files["a"], files["b"], args.alpha, across_settings=True)
    render(report, files["a"], files["b"], console, args.max_rows, args.alpha)
    counts = {v: sum(1 for r in report.rows if r.result.verdict == v)
              for v in ("faster", "slower", "same")}
    if args.rounds < 4:
        console.print("1 round: the calls rest on one process a side, blind to the variance "
                      "between processes" if args.rounds == 1 else
                      f"{args.rounds} rounds: fewer than 4 processes a side never make a change "
                      "significant", highlight=False)
    console.print(f"B vs A: {counts['faster']} faster, {counts['slower']} slower, "
                  f"{counts['same']} same ({args.rounds} rounds; {files['a']}, {files['b']})",
                  highlight=False)
    return status


def _joined(argv: Sequence[str]) -> List[str]:
    """``--a ARGS`` as ``--a=ARGS``: argparse would take ARGS that start with a dash and hold
    no space (``--a --no-throughput``) for a flag of ab's own."""
    out, items = [], iter(argv)
    for item in items:
        value = next(items, None) if item in ("--a", "--b") else None
        out.append(item if value is None else f"{item}={value}")
    return out


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.ab") -> int:
    args = build_parser(prog).parse_args(_joined(sys.argv[1:] if argv is None else argv))
    console = terminal.console(quiet=args.quiet)  # the compare table: standard output
    try:
        return run_ab(args, console)
    except AbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    except ResultsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:  # the reader of standard output left: process.entry's to say
        raise
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (KeyboardInterrupt, Stopped) as stop:
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        said = f"interrupted by {signal_name(signum)}" if isinstance(stop, Stopped) else \
            "interrupted"
        print(f"{said}: the rounds measured so far are in {args.output_dir / 'rounds'} "
              "(not joined, not compared)", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())

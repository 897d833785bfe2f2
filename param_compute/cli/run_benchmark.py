"""``param-compute run -c spec.json`` (``python -m param_compute.run_benchmark``): validate,
expand, run, write results.

``-o`` is PARAM's ``--output-prefix`` by PARAM's door (``python -m
param_compute.run_benchmark -o PREFIX``: ``PREFIX_PID_TIME.json``) and the results file itself
by ``param-compute run -o FILE`` (``--output``), as every ``param-compute`` command's ``-o`` is its
output's path; the long flags are the same by both doors.

Exit status: 0 every run measured; 1 some run failed (its error record is in the results), a
``--verify`` check failed, or (with ``--fail-on-target-miss``) a target was missed; 2 invalid
spec or options (nothing runs, no results file is created).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from param_compute.errors import EXIT_INVALID, EXIT_RUN_FAILED, OptionsError, SpecError
from param_compute.results.file.reading import ResultsFileError
from param_compute.pipeline.outputs import OutputPlan
from param_compute.process.signals import Interrupted
from param_compute.runtime.flags import add_arguments, values_from_args
from param_compute.runtime.options import RunOptions

log = logging.getLogger("param_compute")

#: PARAM's door: ``-o`` keeps PARAM's meaning there (``--output-prefix``).
PARAM_DOOR = "python -m param_compute.run_benchmark"
#: ``param-compute run``'s flag names where they differ: ``-o`` names the results file.
RUN_NAMES = {"output_prefix": ("--output-prefix",), "output": ("-o", "--output")}


def build_parser(prog: str = PARAM_DOOR) -> argparse.ArgumentParser:
    """The flags: ``RunOptions``' and ``OutputPlan``'s fields declare theirs (``runtime.flags``);
    the profilers declare their groups; the rest are about this command itself. ``-o`` is
    PARAM's ``--output-prefix`` by PARAM's door, ``--output`` by any other."""
    from param_compute.profiling.cupti import add_arguments as add_cupti_arguments
    from param_compute.profiling.nsight import add_arguments as add_nsight_arguments

    p = argparse.ArgumentParser(
        prog=prog,
        description="Replay a JSON operator spec: validate, expand, time each run, write JSON "
                    "Lines results (PARAM-compatible).")
    p.add_argument("-c", "--config", type=Path, help="the spec file (JSON)")
    add_arguments(p, RunOptions)
    add_arguments(p.add_argument_group("results"), OutputPlan,
                  None if prog == PARAM_DOOR else RUN_NAMES)
    p.add_argument("--list-ops", action="store_true",
                   help="list registered workloads and the resolvable namespaces, then exit")
    p.add_argument("--explain", action="store_true",
                   help="validate, print how each ranged value expands (and each __copy__), "
                        "then exit: nothing runs, nothing is written")
    p.add_argument("-l", "--log-level", default="INFO", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="log level, any case (DEBUG also prints tracebacks)")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="same as --log-level DEBUG")
    add_cupti_arguments(p)  # --cupti-profiler, --cupti-profiler-metrics, ...
    add_nsight_arguments(p)  # --ncu, --nsys, --run-batch-size, ...
    return p


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("param_compute")
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level))
    root.propagate = False


def _list_ops(toolchain) -> None:
    from param_compute import terminal
    from param_compute.operators.resolution import ALLOWED_FORMS

    console = terminal.console()
    regs = toolchain.registries
    console.print(f"[bold]Registered operators ({len(regs.operators)})[/bold]")
    for name in sorted(regs.operators):
        console.print(f"  {name}")
    for name, why in sorted(regs.unavailable_operators.items()):
        console.print(f"  {name}  [yellow](unavailable: {why})[/yellow]")
    console.print(f"[bold]Also resolvable by name[/bold]: {ALLOWED_FORMS}")
    from rich.markup import escape

    from param_compute.plugins.registry import describe_entries

    console.print(f"[bold]Config iterators[/bold]: "
                  f"{escape(', '.join(describe_entries(regs.config_iterators)))}")
    console.print(f"[bold]Data generators[/bold]: "
                  f"{escape(', '.join(describe_entries(regs.data_generators)))}")


def main(argv: Optional[List[str]] = None, prog: str = PARAM_DOOR) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    level = "DEBUG" if args.verbose else args.log_level
    if args.quiet and level == "INFO":  # warnings and errors only
        level = "WARNING"
    _setup_logging(level)
    if args.version:
        from param_compute.lib import __version__

        print(f"param_compute {__version__}")
        return 0
    try:
        return _run(args, parser)
    except (SpecError, OptionsError) as exc:
        print(str(exc) if isinstance(exc, SpecError) else f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (KeyboardInterrupt, Interrupted) as stop:  # before the run started: nothing to write
        print("interrupted", file=sys.stderr)
        return 128 + int(getattr(stop, "signum", signal.SIGINT))
    except (OSError, ResultsFileError) as exc:  # an output failed mid-run (a full disk)
        log.debug("output failed", exc_info=True)
        print(f"error: {exc}", file=sys.stderr)  # it names the file and says why
        return EXIT_RUN_FAILED
    except Exception as exc:  # an engine bug: say what, keep the traceback for DEBUG
        log.debug("internal error", exc_info=True)
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with --log-level DEBUG for "
              "the traceback)", file=sys.stderr)
        return EXIT_RUN_FAILED


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """The parsed command line as ``RunOptions`` (each flag's field: ``runtime.flags``), with
    PARAM's allowances: ``--cuda-graph`` off a CUDA device is dropped with a warning, and
    ``--cupti-profiler`` turns ``-p`` on (it runs under the PyTorch profiler); a GPU-only
    ``--discard-throttled`` off a CUDA device is refused."""
    from param_compute.profiling.cupti import settings_from_args as cupti_settings

    values = values_from_args(RunOptions, args)
    if values["cuda_graph"] and not values["device"].startswith("cuda"):
        log.warning("--cuda-graph needs a CUDA device; running on %s without it",
                    values["device"])
        values["cuda_graph"] = False  # as PARAM does
    if values["discard_throttled"] and not values["device"].startswith("cuda"):
        raise OptionsError("--discard-throttled drops samples taken while a GPU throttled "
                           "(read through NVML): it needs -d cuda")
    if cupti_settings(args, values["device"]) is not None and not values["profile"]:
        log.warning("--cupti-profiler runs under the PyTorch profiler: -p added")
        values["profile"] = True
    return RunOptions(**values).check()


def _cmd_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The command line's values for the header's ``cmd_args`` (PARAM's key), as JSON."""
    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        return [plain(v) for v in value] if isinstance(value, list) else value

    return {key: plain(value) for key, value in vars(args).items()}


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """parse -> ``RunOptions`` + ``OutputPlan`` -> ``Session`` -> exit status."""
    from param_compute.pipeline.session import Session
    from param_compute.profiling.cupti import settings_from_args as cupti_settings
    from param_compute.profiling.nsight import settings_from_args as nsight_settings

    options = options_from_args(args)
    if args.list_ops:
        from param_compute.runtime.toolchain import Toolchain

        _list_ops(Toolchain.for_options(options))
        return 0
    if args.config is None:
        parser.error("the following arguments are required: -c/--config")
    if args.explain:  # validated as a dry run would (no torch where the index knows the names)
        from dataclasses import replace

        from param_compute.pipeline.loading import load_spec
        from param_compute.plan.explain import print_explanation

        return print_explanation(load_spec(args.config, replace(options, dry_run=True),
                                           owns_process=True).raw)
    outputs = OutputPlan(**values_from_args(OutputPlan, args), console=True)
    session = Session.build(args.config, options, outputs,
                            nsight=nsight_settings(args, options),  # binaries found first
                            cupti=cupti_settings(args, options.device),
                            cmd_args=_cmd_args(args), owns_process=True)
    return session.run().exit_status


if __name__ == "__main__":
    sys.exit(main())

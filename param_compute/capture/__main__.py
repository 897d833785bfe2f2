"""``python -m param_compute.capture``: an execution trace or a live run -> a replayable spec.

    python -m param_compute.capture --from-et trace.json -o spec.json [--skip-views] [--param-form]
    python -m param_compute.capture --run mymodule:train_step -o spec.json [--warmup 1] [--steps 1]

``--run`` imports MODULE (as ``python -m`` would: the current directory is on the path), calls
FUNCTION with no arguments ``--warmup`` times uncaptured (lazy initialization, first-step
allocation of gradients) and then ``--steps`` times under the capture. Build the model at import
time (or cache it) so that only the step is captured.

Writes the spec, validated the way ``run_benchmark`` validates it, and ``NAME.capture.json``
beside it (what was captured, every skipped call with its reason). Exit status: 0 written,
2 bad arguments or input.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Callable, List, Optional

from ..errors import EXIT_INVALID, SpecError

SHOWN_SKIPS = 10


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m param_compute.capture",
        description="Capture the aten op configs of a PyTorch execution trace or of a live run "
                    "into a spec that run_benchmark replays (counts kept).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-et", type=Path, metavar="TRACE",
                        help="a PyTorch execution trace (ExecutionTraceObserver JSON, .gz too)")
    source.add_argument("--run", metavar="MODULE:FUNCTION",
                        help="call FUNCTION of MODULE under a live capture (forward and "
                             "backward, whatever it runs)")
    p.add_argument("-o", "--output", type=Path, required=True, help="the spec to write")
    p.add_argument("--skip-views", action="store_true",
                   help="drop view/alias bookkeeping ops (view, transpose, as_strided, ...)")
    p.add_argument("--warmup", type=int, default=1,
                   help="--run: uncaptured calls before capturing (default 1)")
    p.add_argument("--steps", type=int, default=1,
                   help="--run: captured calls (counts add up; default 1)")
    p.add_argument("--param-form", action="store_true",
                   help="write every aten call in the form PARAM's own replay runs (all "
                        "declared arguments positional, enum values as integer codes); the "
                        "report lists what PARAM still won't reproduce")
    p.add_argument("--no-validate", action="store_true",
                   help="write the spec without validating it")
    return p


def load_function(target: str) -> Callable[[], object]:
    """``module:function`` (or ``module:object.method``) -> the callable."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--run {target!r}: write MODULE:FUNCTION")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    value = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"--run {target!r}: {attribute} is not callable")
    return value


def capture_run(function: Callable[[], object], warmup: int = 1, steps: int = 1,
                skip_views: bool = False, source: str = "live capture"):
    from .live import capture_ops

    for _ in range(warmup):
        function()
    with capture_ops(skip_views=skip_views, source=source) as cap:
        for _ in range(steps):
            function()
    return cap.workload


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.warmup < 0 or args.steps < 1:
        print("error: --warmup must be >= 0 and --steps >= 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        if args.from_et is not None:
            from .execution_trace import capture_execution_trace

            workload = capture_execution_trace(args.from_et, skip_views=args.skip_views)
        else:
            function = load_function(args.run)
            workload = capture_run(function, args.warmup, args.steps, args.skip_views,
                                   source=f"--run {args.run}")
    except (OSError, ValueError, ImportError, AttributeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    spec, notes = workload.spec_and_notes(args.param_form)
    if not spec:
        print(f"error: nothing to replay: {workload.summary()}", file=sys.stderr)
        return EXIT_INVALID
    if not args.no_validate:
        from ..session import Toolchain

        try:
            Toolchain.start().validate(spec, str(args.output))
        except SpecError as exc:  # a capture bug: say so, but keep what was captured
            print(f"warning: the captured spec does not validate:\n{exc}", file=sys.stderr)
    spec_path, report = workload.write_spec(args.output, spec, notes)
    print(workload.summary())
    if notes is not None:
        from .param_form import note_summary

        print(f"  {note_summary(notes, workload.configs)}")
        shown = sorted(notes, key=lambda n: not n.fails)[:SHOWN_SKIPS]
        for note in shown:
            effect = "fails" if note.fails else "differs"
            print(f"    {effect}: {note.op} input {note.input_index}: {note.reason}")
        if len(notes) > SHOWN_SKIPS:
            print(f"    ... {len(notes) - SHOWN_SKIPS} more notes in {report}")
    skipped = sorted(workload.skipped, key=lambda s: -s.count)
    for skip in skipped[:SHOWN_SKIPS]:
        print(f"  skipped {skip.count} x {skip.op}: {skip.reason}")
    if len(skipped) > SHOWN_SKIPS:
        print(f"  ... {len(skipped) - SHOWN_SKIPS} more skip reasons in {report}")
    print(f"spec: {spec_path}\nreport: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

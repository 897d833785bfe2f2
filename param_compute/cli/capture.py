"""``python -m param_compute.capture``: an execution trace or a live run -> a replayable spec.

    python -m param_compute.capture --from-et trace.json -o spec.json [--skip-views] [--param-form]
        [--trace-step N|all] [--kineto kineto.json] [--allow-namespace fbgemm] [--target-device cpu]
    python -m param_compute.capture --run mymodule:train_step -o spec.json [--warmup 1] [--steps 1]

``--run`` imports MODULE (a module name, as ``python -m`` would: the current directory is on
the path; or a ``.py`` file, its folder then on the path), calls FUNCTION with no arguments
``--warmup`` times uncaptured (lazy initialization, first-step allocation of gradients), times
it unprofiled (the real step) and op by op in place (the originals, ``capture.live.timing``),
then calls it ``--steps`` times under the capture. Build the model at import time (or cache it)
so that only the step is captured. A ``torch.compile``d model compiles again in the warm-up,
through a recorder of its graphs (``capture.live.compiled``): each compiled region is then one
call of its graph, timed, captured and replayed as one.

The user's code runs in a process of its own, the leader of a process group the command owns
(``process.group``): Ctrl-C, SIGTERM or SIGHUP ends the whole group, whatever the step forked
(one line, ``interrupted by SIGINT``, exit 128 + the signal), and whatever the step leaves
running after the capture is ended too. The step's ``sys.exit``, a ``KeyboardInterrupt`` it
raises, an import that fails, a step that ends or crashes its process: one line each, exit 1
(2 where ``--run`` names no module or function), nothing written; ``-v`` adds the traceback.

Writes the spec, validated the way ``run_benchmark`` validates it, ``NAME.step.json`` (the
step's calls in order with their dataflow, for ``run_benchmark --replay-step``) and
``NAME.capture.json`` beside it (what was captured, every call not captured with its kind and reason, the steps, how
layouts were obtained, configs with no kernel on ``--target-device``, original times joined
from ``--kineto``). The summary says it in one short line per group; ``-v`` logs every call not
captured. Exit status: 0 written, 1 the step failed, 2 bad arguments or input,
128 + N stopped by signal N.

A trace is data: reading one runs nothing it names (only allow-listed pure tensor ops, on meta
tensors, to recover layouts: ``capture.meta_ops``), is bounded (``--max-trace-bytes``, regular
files only, depth) and checked node by node (``capture.trace.check``). The outputs are checked
before the trace is read, as ``run_benchmark`` checks its own (``files``): never an
input, never through a symbolic link, never a FIFO or directory; each is written to a new file
and renamed into place.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from param_compute.errors import EXIT_INVALID, EXIT_RUN_FAILED, OptionsError, SpecError
from param_compute.formatting import printable

SHOWN_SKIPS = 10


def build_parser(prog: str = "python -m param_compute.capture") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Capture the aten op configs of a PyTorch execution trace or of a live run "
                    "into a spec that run_benchmark replays (counts kept).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-et", type=Path, metavar="TRACE", action="append",
                        help="a PyTorch execution trace (ExecutionTraceObserver JSON, .gz too); "
                             "repeat it, one per rank, for a distributed job (each with its "
                             "--kineto: the rank is its distributedInfo's, else the order)")
    source.add_argument("--run", "--live", metavar="MODULE:FUNCTION", dest="run",
                        help="call FUNCTION of MODULE under a live capture (forward and "
                             "backward, whatever it runs); under torchrun each rank's capture "
                             "is joined into one job by rank 0 (spell it --live there: torchrun "
                             "takes --run for a flag of its own)")
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
    p.add_argument("--trace-step", metavar="N|all", dest="step",
                   help="--from-et: the ProfilerStep#N window to capture, or 'all' (counts are "
                        "then totals); default: the last complete step")
    # --step is run's step file everywhere else: here the old name, said once on stderr
    p.add_argument("--step", metavar="N|all", dest="old_step", help=argparse.SUPPRESS)
    p.add_argument("--kineto", type=Path, metavar="FILE", action="append",
                   help="--from-et: a Kineto trace of the same run (JSON, .gz or a .tar.gz "
                        "archive): each config gets its original CPU and device time "
                        "(original_us), the summary the coverage by time; one per --from-et, "
                        "in the same order")
    p.add_argument("--allow-namespace", action="append", default=[], metavar="NS",
                   help="capture operators of namespace NS besides aten (repeatable); the run "
                        "must allow it too (run_benchmark --allow-namespace NS)")
    p.add_argument("--target-device", default=None, metavar="DEVICE",
                   help="the device the spec will replay on, whose kernels are checked for "
                        "every config (default: cuda if available, else cpu)")
    p.add_argument("--subnormal-state", type=float, default=None, metavar="FRACTION",
                   help="--from-et: the share of subnormal values in the optimizer state the "
                        "step reads (a trace records no values; on a CPU subnormal state makes "
                        "Adam's sqrt several times slower): whole state tensors are made "
                        "subnormal to that share. A live capture (--run) measures it instead")
    p.add_argument("--max-trace-bytes", type=_trace_bytes, default=None, metavar="SIZE",
                   help="--from-et, --kineto: the most JSON text (after decompression) one trace "
                        "file may hold, e.g. 4GiB (default 2GiB); reading stops at the cap")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log every call not captured, with its reason (--run: and the "
                        "traceback of a step or import that failed)")
    return p


def _trace_bytes(text: str) -> int:
    from param_compute.runtime.memory_guard import parse_size

    try:
        size = parse_size(text)
    except OptionsError:
        size = None
    if size is None or size <= 0:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as a size; write e.g. 4GiB or "
                                         "500MB")
    return size


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _load_namespaces(namespaces: List[str]) -> None:
    """Import the libraries registering allowed namespaces' operators (fbgemm: fbgemm_gpu)."""
    from param_compute.operators.resolution import load_namespace

    for namespace in namespaces:
        load_namespace(namespace)


def capture_run(function: Callable[[], object], warmup: int = 1, steps: int = 1,
                skip_views: bool = False, source: str = "live capture",
                allow_namespaces: Sequence[str] = (), repeats: int = 3):
    """Warm up, time the step unprofiled (``repeats`` times) and op by op in place
    (``capture.live.timing``), then capture ``steps`` steps with those times as originals."""
    from param_compute.capture.live.compiled import RegionRecorder
    from param_compute.capture.live.dispatch import capture_ops
    from param_compute.capture.live.step_code import this_process_only
    from param_compute.capture.live.timing import host_gaps, time_ops_in_place, time_step
    from param_compute.results.stats import median

    function = this_process_only(function)  # a forked copy that returns from it ends there
    # Compiled regions (torch.compile) recorded from their first compile, in the warm-up:
    # each a call of its graph, timed and captured as one (``capture.live.compiled``).
    with RegionRecorder() as regions:
        for _ in range(warmup):
            function()
        host: list = []
        real = time_step(function, max(1, repeats), host=host)
        faults: dict = {}
        timeline: dict = {}
        in_place = time_ops_in_place(function, steps, faults=faults, timeline=timeline)
        gaps, tail = host_gaps(timeline)
        with capture_ops(skip_views=skip_views, source=source,
                         allow_namespaces=allow_namespaces, originals=in_place,
                         original_faults=faults, original_gaps=gaps, regions=regions) as cap:
            for _ in range(steps):
                function()
    workload = cap.workload
    timed = sum(len(v) for v in in_place.values())
    workload.kineto = {"file": "live timing (unprofiled)",
                       "joined_by": "each op timed in place (perf_counter_ns around the call, "
                                   "no profiler), occurrence by occurrence",
                       "calls": workload.calls, "joined_calls": min(timed, workload.calls),
                       "real_step_us": round(median(real) * steps, 1),
                       "real_step_repeats_us": [round(t, 1) for t in real]}
    workload.step.real_step_us = median(real) * steps
    workload.step.real_host_us = median(host) * steps
    workload.step.tail_gap_us = cap.pending_gap + tail
    from param_compute.capture.live.dispatch import live_distributed

    workload.distributed = live_distributed()  # a rank of a job under torchrun
    return workload


def join_ranks(workload):
    """Under torchrun, every rank's live capture handed to rank 0, which writes the job
    (``capture.job``): rank 0's workload gets ``job_parts`` (all of them, by rank), another
    rank's an empty list (nothing to write). A process outside a job is left as it is."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return workload
    import torch.distributed as dist

    own = not dist.is_initialized()
    if own:  # the step itself made no process group: one for the join only
        dist.init_process_group("gloo")
    try:
        parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(workload, parts, dst=0)
        workload.job_parts = parts if parts is not None else []
    finally:
        if own:
            dist.destroy_process_group()
    return workload


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m param_compute.capture") -> int:
    args = build_parser(prog).parse_args(argv)
    refused = _refused(args)
    if refused is not None:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_INVALID
    report = None
    if args.run is not None:
        from param_compute.process.group import report_pipe

        report = report_pipe()  # given by the command that started this process to lead
        if report is None:
            return _run_in_own_group(list(sys.argv[1:] if argv is None else argv), args)
    logger = logging.getLogger("param_compute.capture")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    if args.verbose:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        return _main(args) if report is None else _lead(args, report)
    except KeyboardInterrupt:  # --from-et stopped by Ctrl-C: one line, no traceback
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        logger.removeHandler(handler)


def _refused(args: argparse.Namespace) -> Optional[str]:
    """What is wrong with the arguments argparse took, or None (the old ``--step`` taken as
    ``--trace-step``, with a warning)."""
    if args.old_step is not None:
        print("warning: capture --step is now --trace-step (--step is run's step file); "
              "--step will go", file=sys.stderr)
        if args.step is not None and args.step != args.old_step:
            return "--step and --trace-step say different steps: give --trace-step"
        args.step = args.old_step
    if args.warmup < 0 or args.steps < 1:
        return "--warmup must be >= 0 and --steps >= 1"
    if args.from_et is None and (args.step is not None or args.kineto is not None):
        return "--trace-step and --kineto read an execution trace: use them with --from-et"
    if args.subnormal_state is not None:
        if args.from_et is None:
            return ("--subnormal-state gives a trace's optimizer state its values: use it with "
                    "--from-et (--run measures them)")
        if not 0 < args.subnormal_state <= 1:  # nan fails both
            return (f"--subnormal-state is a fraction in (0, 1], got "
                    f"{printable(repr(args.subnormal_state), 40)}")
    return None


#: What the process running the user's code reports to the command (``process.group``'s
#: report pipe): it began writing the outputs; it got to its end (whatever its status).
WRITING, DONE = b"writing\n", b"done\n"


def _run_in_own_group(argv: List[str], args: argparse.Namespace) -> int:
    """``--run``: this command again, as the leader of a process group this process owns
    (``process.group``), which runs the user's code; what happened to it, in one line where
    it could not say so itself."""
    from param_compute.process.group import STOP_SIGNALS, package_env, run_grouped, signal_name

    try:
        check_capture_outputs(args)  # before a process starts, as the leader checks them
        command = [sys.executable, "-m", "param_compute", "capture", *argv]
        outcome = run_grouped(command, env=package_env(), report=True)
    except OptionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:  # before the group started: nothing to end
        print("interrupted: nothing written", file=sys.stderr)
        return 128 + signal.SIGINT
    shown = printable(args.run, 300)
    unwritten = "some outputs may be written" if WRITING in outcome.report else "nothing written"
    status = outcome.returncode
    if outcome.signum is not None or (status < 0 and -status in STOP_SIGNALS):
        signum = outcome.signum if outcome.signum is not None else -status
        print(f"interrupted by {signal_name(signum)}: the step's processes were ended; "
              f"{unwritten}", file=sys.stderr)
        return 128 + signum
    if DONE not in outcome.report:
        how = (f"was killed by {signal_name(-status)}" if status < 0 else
               f"ended with exit status {status} (os._exit?)")
        print(f"error: --run {shown}: the process running the step {how} before the capture "
              f"finished; {unwritten}", file=sys.stderr)
        return EXIT_RUN_FAILED
    if outcome.leftovers:
        print(f"warning: --run {shown}: the step left {outcome.leftovers} process"
              f"{'es' if outcome.leftovers != 1 else ''} running: ended", file=sys.stderr)
    return status if status >= 0 else EXIT_RUN_FAILED


def _lead(args: argparse.Namespace, report: int) -> int:
    """The leader of the command's process group (``--run``): the capture, then its report
    to the command (through ``report``, the pipe it gave); threads the step left running are
    not waited for."""
    from param_compute.capture.live.step_code import StepFailed, stray_threads, thread_names
    from param_compute.process.group import lead_group

    lead_group()  # the command's death is a SIGTERM to this process already (process.group)
    status = EXIT_RUN_FAILED
    try:
        status = _main(args, report)
    except StepFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        status = exc.status
    finally:
        _tell(report, DONE)
    _end_process_group()
    left = stray_threads()
    if left:
        print(f"warning: --run {printable(args.run, 300)}: the step left {len(left)} thread"
              f"{'s' if len(left) != 1 else ''} running ({thread_names(left)}): not waited "
              "for", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)  # the interpreter would wait for them at exit, for ever
    return status


def _end_process_group() -> None:
    """End a process group the user's step made (a DDP step under torchrun), once the capture
    is written: left to the interpreter's exit, gloo's threads can abort the process there
    ("terminate called without an active exception"), failing a capture that succeeded."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except (RuntimeError, ValueError):  # the group is the user's: its end is not ours to fail
        pass


def _tell(report: Optional[int], what: bytes) -> None:
    """Say ``what`` to the command through its report pipe (``_lead``), if there is one."""
    if report is not None:
        try:
            os.write(report, what)
        except OSError:
            pass


def _live_workload(args: argparse.Namespace):
    """``--run``: the step imported, timed and captured (``capture_run``); ``StepFailed``
    where that failed (its traceback logged at debug level, ``-v``). The streams and working
    directory the step changed are put back (``step_code.Restored``)."""
    from param_compute.capture.live.step_code import Restored, failure, load_function

    _load_namespaces(args.allow_namespace)
    restored = Restored()
    try:
        function = load_function(args.run)
        rank = os.environ.get("RANK")
        source = f"--run {args.run}" + (f" (rank {rank})" if rank is not None else "")
        try:
            return join_ranks(capture_run(function, args.warmup, args.steps, args.skip_views,
                                          source=source,
                                          allow_namespaces=args.allow_namespace))
        except BaseException as exc:  # sys.exit, KeyboardInterrupt: the step's own
            raise failure(printable(args.run, 300), "the step", exc) from None
    finally:
        restored.restore()
        restored.close()


def check_capture_outputs(args: argparse.Namespace) -> None:
    """The spec and its report checked before anything is read (``OptionsError``)."""
    from param_compute.capture.workload import report_path
    from param_compute.files import check_outputs

    from param_compute.spec.step_file import step_path

    inputs = {}
    for flag, paths in (("--from-et", args.from_et), ("--kineto", args.kineto)):
        inputs.update({f"{flag} trace" + (f" {i + 1}" if i else ""): path
                       for i, path in enumerate(paths or [])})
    check_outputs({"-o/--output": args.output, "report": report_path(args.output),
                   "step file": step_path(args.output)}, inputs)


def _traces(args: argparse.Namespace, target: str):
    """Each ``--from-et`` trace captured, with its ``--kineto`` (one each, or none)."""
    from param_compute.capture.trace.execution_trace import capture_execution_trace

    kinetos = args.kineto or []
    if kinetos and len(kinetos) != len(args.from_et):
        raise OptionsError(f"{len(args.from_et)} --from-et and {len(kinetos)} --kineto: give "
                           "one --kineto per --from-et, in the same order (or none)")
    return [capture_execution_trace(
        trace, skip_views=args.skip_views, step=args.step,
        allow_namespaces=args.allow_namespace,
        kineto=kinetos[index] if kinetos else None, target_device=target,
        max_trace_bytes=args.max_trace_bytes, subnormal_state=args.subnormal_state)
        for index, trace in enumerate(args.from_et)]


def _is_job(workloads) -> bool:
    """Several ranks, or one trace with collectives: written as a job (``capture.job``)."""
    return len(workloads) > 1 or any(w.communication_us()["calls"] or (
        w.distributed or {}).get("world_size", 1) > 1 for w in workloads)


def _workload(args: argparse.Namespace):
    """(the workload captured, or None; the job's captures where there is a job to write:
    several ranks, collectives, or a live rank under torchrun (an empty list: rank 0 writes
    it)): from the traces (``--from-et``) or the live step (``--run``)."""
    target = args.target_device or _default_device()
    check_capture_outputs(args)
    if args.from_et is not None:
        workloads = _traces(args, target)
        return (None, workloads) if _is_job(workloads) else (workloads[0], None)
    workload = _live_workload(args)  # torch imported by the step's module or the capture
    workload.target_device = target
    return workload, workload.job_parts


def _main(args: argparse.Namespace, report: Optional[int] = None) -> int:
    try:
        workload, job = _workload(args)
        if job is not None and not job:  # a live rank under torchrun: rank 0 writes the job
            print(f"{workload.summary()}\n  handed to rank 0, which writes the job: "
                  f"{args.output}")
            return 0
        if job is not None:
            _tell(report, WRITING)
            return _write_job(args, job)
    except (OSError, ValueError, ImportError, AttributeError, OptionsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    spec, notes = workload.spec_and_notes(args.param_form)
    if not spec:
        print(f"error: nothing to replay: {workload.summary()}", file=sys.stderr)
        return EXIT_INVALID
    _validate(spec, args)
    _tell(report, WRITING)
    try:
        spec_path, report_file = workload.write_spec(args.output, spec, notes)
    except OSError as exc:
        print(f"error: cannot write {args.output} or its report: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_INVALID
    print("\n".join(workload.summary_lines()))
    if notes is not None:
        _print_notes(notes, workload, report_file)
    if workload.skipped:
        print(f"  every call not captured, with its reason: {report_file}"
              + ("" if args.verbose else " (or -v)"))
    print(f"spec: {spec_path}\nreport: {report_file}")
    return 0


def _print_notes(notes, workload, report: Path) -> None:
    """``--param-form``: what PARAM's replay will not reproduce, the first few."""
    from param_compute.capture.param_form import note_summary

    print(f"  {note_summary(notes, workload.configs)}")
    shown = sorted(notes, key=lambda n: not n.fails)[:SHOWN_SKIPS]
    for note in shown:
        effect = "fails" if note.fails else "differs"
        print(f"    {effect}: {note.op} input {note.input_index}: {note.reason}")
    if len(notes) > SHOWN_SKIPS:
        print(f"    ... {len(notes) - SHOWN_SKIPS} more notes in {report}")


def _validate(spec, args: argparse.Namespace) -> None:
    """The spec validated as a run validates it; a capture bug is warned about, the spec kept."""
    if args.no_validate:
        return
    from param_compute.runtime.toolchain import Toolchain

    try:
        toolchain = Toolchain.start()
        toolchain.resolver.allow(args.allow_namespace)
        toolchain.validate(spec, str(args.output))
    except SpecError as exc:  # a capture bug: say so, but keep what was captured
        print(f"warning: the captured spec does not validate:\n{exc}", file=sys.stderr)


def _write_job(args: argparse.Namespace, workloads) -> int:
    """Several ranks' captures (or one with collectives) as one job: ``capture.job``."""
    from param_compute.capture.job import JobCapture
    from param_compute.spec.step_file import step_path

    if args.param_form:
        raise OptionsError("--param-form: PARAM's replay has no collectives nor ranks; a job "
                           "is written in param_compute's form only")
    names = [str(t) for t in args.from_et] if args.from_et else \
        [w.source for w in workloads]
    job = JobCapture(workloads, names)
    spec = job.spec()
    _validate(spec, args)
    try:
        spec_path, report = job.write(args.output, spec)
    except OSError as exc:
        print(f"error: cannot write {args.output} or its report: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_INVALID
    print("\n".join(job.summary_lines()))
    print(f"spec: {spec_path}\nstep: {step_path(spec_path)}\nreport: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

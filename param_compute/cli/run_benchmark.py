"""``python -m param_compute.run_benchmark -c spec.json``: validate, expand, run, write results.

Exit status: 0 every run measured; 1 some run failed (its error record is in the results), a
``--verify`` check failed, or (with ``--fail-on-target-miss``) a target was missed; 2 invalid
spec or options (nothing runs, no results file is created).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, List, Optional

from param_compute.errors import EXIT_INVALID, EXIT_RUN_FAILED, OptionsError, SpecError
from param_compute.runtime.options import RunOptions
from param_compute.process.signals import Interrupted
from param_compute.runtime.timing import ExecMode
from param_compute.runtime.step_session import add_arguments as add_step_arguments, step_sinks
from param_compute.plan.explain import print_explanation
from param_compute.results.sinks.console import SORT_COLUMNS, max_rows, protocol_text

log = logging.getLogger("param_compute")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m param_compute.run_benchmark",
        description="Replay a JSON operator spec: validate, expand, time each run, write JSON "
                    "Lines results (PARAM-compatible).")
    p.add_argument("-c", "--config", type=Path, help="the spec file (JSON)")
    p.add_argument("-w", "--warmup", type=int, default=1, help="warm-up iterations (default 1)")
    p.add_argument("-i", "--iteration", type=int, default=1,
                   help="measured iterations (default 1)")
    p.add_argument("-b", "--backward", action="store_true",
                   help="also time the backward pass (gradient creation is not timed)")
    p.add_argument("-d", "--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--exec-mode", choices=[m.value for m in ExecMode],
                   default=ExecMode.DISCRETE.value,
                   help="discrete: each iteration timed alone; continuous: the loop timed as a "
                        "whole; continuous_events: back to back, one event pair per iteration")
    p.add_argument("--min-time", type=float, default=0.0, metavar="S",
                   help="adaptive: after -i iterations keep measuring until the measured time "
                        "reaches S seconds (capped by --max-iteration)")
    p.add_argument("--max-iteration", type=int, default=100_000,
                   help="cap on measured iterations with --min-time (default 100000)")
    p.add_argument("--warmup-time", type=float, default=0.0, metavar="S",
                   help="after the -w calls keep warming up until S seconds of calls have run "
                        "(with --min-time also until the per-block median settles); "
                        "recommended: --warmup-time 0.2 --min-time 0.5")
    p.add_argument("--verify", nargs="?", const="eager", choices=["eager", "fp64"],
                   help="check what was timed (compiled, graph-replayed) against an eager call "
                        "(or, =fp64, a float64 eager call): outputs and, with -b, gradients; "
                        "a FAIL exits 1")
    p.add_argument("--peaks", type=Path, metavar="FILE",
                   help="machine peaks (FLOP/s per dtype, bytes/s) for utilization, instead of "
                        "those `python -m param_compute.calibrate` cached for this machine")
    p.add_argument("--fail-on-target-miss", action="store_true",
                   help="exit 1 when a config's target is missed")
    p.add_argument("--cuda-l2-cache", choices=["on", "off"], default="off", nargs="?",
                   const="on",
                   help="off (default): flush the L2 cache before each discrete iteration; "
                        "on (or the bare flag): keep it warm, as PARAM's default")
    p.add_argument("--no-throughput", action="store_true",
                   help="skip counting FLOPs/bytes (one extra untimed call per pass)")
    p.add_argument("--pt2-model", action="store_true",
                   help="torch.compile each operator call; compile time reported separately")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the forward call in a CUDA graph once, replay it per iteration")
    p.add_argument("-p", "--profile", action="store_true",
                   help="run under torch.profiler; write a Chrome trace beside the results")
    p.add_argument("--et", action="store_true",
                   help="write a PyTorch execution trace of the run beside the results")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed run")
    p.add_argument("--max-memory", default="auto", metavar="SIZE",
                   help="refuse configs whose tensors are estimated above SIZE (e.g. 8GB, "
                        "512MiB) without allocating; 'auto' (default): half the memory "
                        "available at start; 'none': no limit")
    p.add_argument("--isolate", action="store_true",
                   help="run configs in a worker subprocess (reused while healthy): a crash "
                        "or hang becomes an error record and the run goes on")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="bound each config to S seconds (implies --isolate)")
    p.add_argument("--resume", action="store_true",
                   help="with --output: continue an interrupted run in that file, skipping "
                        "the runs already in it")
    p.add_argument("--resume-mixed", action="store_true",
                   help="let --resume continue a file written with other options, device, "
                        "seed or spec (refused otherwise: the file would mix settings)")
    p.add_argument("--num-threads", type=int, default=1,
                   help="torch intra-op threads (default 1, as PARAM)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed for generated data; same seed, same data (default 0)")
    p.add_argument("-o", "--output-prefix", default="benchmark_result",
                   help="results go to PREFIX_PID_TIMESTAMP.json (default benchmark_result)")
    p.add_argument("--output", type=Path, help="write results to exactly this file")
    p.add_argument("-a", "--append", action="store_true",
                   help="append to the results file instead of overwriting it")
    p.add_argument("--csv", type=Path, metavar="PATH",
                   help="also write a CSV file: one row per run and pass")
    p.add_argument("--oss-json", type=Path, metavar="PATH",
                   help="also write the PyTorch OSS benchmark-database JSON format")
    p.add_argument("--shard", metavar="I/N",
                   help="run shard I of N (cost-balanced slice of the runs; under torchrun "
                        "RANK/WORLD_SIZE choose it); results go to OUT.shardIofN.json")
    p.add_argument("-r", "--resume-id",
                   help="skip runs before this op_name|id; it and the runs after it run")
    p.add_argument("-s", "--stop-id", "--stop_id", dest="stop_id",
                   help="stop at this op_name|id: it and everything after are skipped")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and expand only: write the planned runs, allocate nothing")
    p.add_argument("--explain", action="store_true",
                   help="print how each ranged value expands, then exit (nothing runs)")
    p.add_argument("--workloads-dir", type=Path, action="append", default=[],
                   help="import every .py in DIR as a workload module (repeatable)")
    p.add_argument("--allow-namespace", action="append", default=[], metavar="NS",
                   help="let NS::op operators of the spec run (fbgemm, ...; repeatable): "
                        "besides aten, a namespace runs only where the run allows it")
    p.add_argument("--list-ops", action="store_true",
                   help="list registered workloads and the resolvable namespaces, then exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    p.add_argument("--max-rows", type=max_rows, default=40, metavar="N|all", help="table rows")
    p.add_argument("--sort", choices=SORT_COLUMNS, metavar="COLUMN",
                   help="summary order: median|n|tflops|gbps (largest first), op|id|config")
    p.add_argument("-l", "--log-level", default="INFO", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="log level, any case (DEBUG also prints tracebacks)")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="same as --log-level DEBUG")
    from param_compute.profiling.cupti import add_arguments as add_cupti_arguments
    from param_compute.profiling.nsight import add_arguments as add_nsight_arguments
    from param_compute.cli.replay_checks import add_arguments as add_replay_arguments

    add_cupti_arguments(p)  # --cupti-profiler, --cupti-profiler-metrics, ...
    add_nsight_arguments(p)  # --ncu, --nsys, --run-batch-size, ...
    add_replay_arguments(p)  # --cold, --match-capture
    return add_step_arguments(p)  # --replay-step, --step FILE


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("param_compute")
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level))
    root.propagate = False


def _results_path(args: argparse.Namespace, start: datetime) -> Path:
    if args.output is not None:
        return args.output
    return Path(f"{args.output_prefix}_{os.getpid()}_{int(start.timestamp())}.json")


def _list_ops(toolchain) -> None:
    from rich.console import Console

    from param_compute.operators.resolution import ALLOWED_FORMS

    console = Console()
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


#: The results-file locks ``_main`` took (``results.outputs.lock_results``).
_HELD_LOCKS: List[Any] = []


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = "DEBUG" if args.verbose else args.log_level
    _setup_logging(level)
    if args.version:
        from param_compute.lib import __version__

        print(f"param_compute {__version__}")
        return 0
    try:
        return _main(args, parser)
    except (SpecError, OptionsError) as exc:
        print(str(exc) if isinstance(exc, SpecError) else f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (KeyboardInterrupt, Interrupted) as stop:  # before the run started: nothing to write
        print("interrupted", file=sys.stderr)
        return 128 + int(getattr(stop, "signum", signal.SIGINT))
    except Exception as exc:  # an engine bug: say what, keep the traceback for DEBUG
        log.debug("internal error", exc_info=True)
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with --log-level DEBUG for "
              "the traceback)", file=sys.stderr)
        return EXIT_RUN_FAILED
    finally:
        while _HELD_LOCKS:
            _HELD_LOCKS.pop().release()


def _main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from param_compute.results.sinks.console import ConsoleReporter
    from param_compute.runtime.devices import check_device
    from param_compute.results.sinks.export import CsvExporter, OssJsonExporter
    from param_compute.runtime.memory_guard import parse_size
    from param_compute.profiling.batches import BatchProfiler
    from param_compute.profiling.nsight import settings_from_args
    from param_compute.profiling.traces import profiled, trace_paths
    from param_compute.profiling.cupti import settings_from_args as cupti_settings
    from param_compute.profiling.cupti import warm_up_kineto
    from param_compute.profiling.cupti import write_summary as write_cupti_summary
    from param_compute.results.outputs import check_outputs, lock_results, unused_name
    from param_compute.results.resume import scan_results
    from param_compute.spec.loader import read_spec_bytes, spec_from_bytes
    from param_compute.runtime.engine import Engine
    from param_compute.cli.replay_checks import before_run
    from param_compute.runtime.toolchain import Toolchain
    from param_compute.plan.sharding import plan_shard, resolve_shard
    from param_compute.process.signals import GUARD
    from param_compute.runtime.sysinfo import sys_info
    from param_compute.results.sinks.jsonl import JsonlResultWriter
    from param_compute.results.records import add_param_header_keys

    for directory in args.workloads_dir:
        if not directory.is_dir():
            raise OptionsError(f"--workloads-dir {directory}: not a directory")
    # Start-up (torch, plugins) creates ~170k long-lived objects. Collecting them is wasted work,
    # and without freezing, every later collection and the one at exit walk them again (~0.6 s).
    gc.disable()
    try:
        toolchain = Toolchain.start(args.workloads_dir)
    finally:
        gc.freeze()
        gc.enable()
    if args.list_ops:
        _list_ops(toolchain)
        return 0
    if args.config is None:
        parser.error("the following arguments are required: -c/--config")
    shard = resolve_shard(args.shard)  # --shard I/N or torchrun: this process's slice
    if shard is not None:  # its own device and files: out.json -> out.shard0of2.json
        args.device = shard.device(args.device)
        args.output = shard.path(args.output or _results_path(args, datetime.now()))
        args.csv = args.csv and shard.path(args.csv)
        args.oss_json = args.oss_json and shard.path(args.oss_json)
    if args.cuda_graph and not args.device.startswith("cuda"):
        log.warning("--cuda-graph needs a CUDA device; running on %s without it", args.device)
        args.cuda_graph = False  # as PARAM does
    cupti = cupti_settings(args, args.device)
    if cupti is not None and not args.profile:
        log.warning("--cupti-profiler runs under the PyTorch profiler: -p added")
        args.profile = True
    options = RunOptions(device=args.device, warmup=args.warmup, iteration=args.iteration,
                         backward=args.backward, exec_mode=ExecMode(args.exec_mode),
                         num_threads=args.num_threads, seed=args.seed,
                         resume_id=args.resume_id, stop_id=args.stop_id,
                         dry_run=args.dry_run, min_time=args.min_time,
                         max_iteration=args.max_iteration, warmup_time=args.warmup_time,
                         verify=args.verify, peaks=str(args.peaks) if args.peaks else None,
                         cuda_l2_cache=args.cuda_l2_cache == "on",
                         throughput=not args.no_throughput, pt2_model=args.pt2_model,
                         cuda_graph=args.cuda_graph, profile=args.profile,
                         execution_trace=args.et, fail_fast=args.fail_fast,
                         max_memory=("auto" if args.max_memory == "auto"
                                     else parse_size(args.max_memory)),
                         isolate=args.isolate, timeout=args.timeout, cold=args.cold).check()
    if args.resume and (args.output is None or args.append):
        raise OptionsError("--resume needs --output PATH (and no --append): it continues the "
                           "run in that file")
    if not options.dry_run:
        check_device(options.device)
    if options.peaks or (options.throughput and not options.dry_run):  # bad peaks: said now
        from param_compute.runtime.calibrate import peaks_for_run
        peaks_for_run(options.device, options.num_threads, options.peaks)
    nsight = settings_from_args(args, options)  # --ncu/--nsys: binaries found before any run
    toolchain.resolver.allow(args.allow_namespace)
    # Read once: a FIFO or <(cat spec) yields its bytes only once; the hash is of these bytes.
    spec_bytes = read_spec_bytes(args.config)
    gc.disable()  # a spec has no reference cycles; it lives until exit: frozen, not walked again
    try:
        raw = spec_from_bytes(spec_bytes, str(args.config))
        spec = toolchain.validate(raw, str(args.config))
    finally:
        gc.freeze()
        gc.enable()
    if args.explain:  # how each ranged value expands; nothing runs
        return print_explanation(raw)
    options = before_run(spec, options, args.match_capture)  # said before any run
    digest = hashlib.sha256(spec_bytes).hexdigest()
    start = datetime.now()
    path = _results_path(args, start)
    if args.output is None:  # a predictable default name never lands on an existing file
        path = unused_name(path)
    # Every output checked, and the results file locked, before anything is written or run.
    check_outputs({"--output": path, "--csv": args.csv, "--oss-json": args.oss_json},
                  {"-c/--config spec": args.config, "--peaks": args.peaks})
    _HELD_LOCKS.append(lock_results(path))  # released when main() returns
    run_options = options.to_json()
    run_options["config_file"] = str(args.config)
    run_options["spec_sha256"] = digest
    cmd_args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k != "workloads_dir"}
    cmd_args["workloads_dir"] = [str(d) for d in args.workloads_dir]
    header = {"run_options": run_options,
              "sys_info": sys_info(options.device, include_torch=True,
                                   num_threads=options.num_threads),
              "start_time": start.isoformat(timespec="seconds")}
    add_param_header_keys(header, cmd_args)  # PARAM readers' keys too
    resume = None
    if args.resume:  # compared with the header as this run would write it
        resume = scan_results(args.output)
        resume.check_matches(digest, options.dry_run, header["run_options"], args.resume_mixed,
                             header["sys_info"])
    run_filters = [resume.wants] if resume is not None else []
    if shard is not None:
        shard_plan = plan_shard(spec, toolchain.registries, options.device, shard)
        header["shard"] = shard_plan.header()
        run_filters.append(shard_plan.wants)
        log.info("shard %d of %d (%s): %d of %d runs, %.0f%% of the estimated cost",
                 shard.index, shard.count, shard.source, len(shard_plan.keys),
                 shard_plan.total_runs, 100 * shard_plan.cost / (shard_plan.total_cost or 1))
    traces = {name: str(file) for name, file in trace_paths(path).items()
              if (name == "trace_file" and options.profile)
              or (name == "et_file" and options.execution_trace)}
    sinks = [JsonlResultWriter(path, header, append=args.append, finish_extra=traces,
                               resume=resume),
             ConsoleReporter(str(path), progress=False if args.no_progress else None,
                             max_rows=args.max_rows, sort=args.sort,
                             protocol=protocol_text(args.warmup_time, args.min_time))]
    # On --resume and -a the results hold earlier runs too: the exports are rebuilt from them.
    earlier = path if (resume is not None or args.append) else None
    if args.csv is not None:
        sinks.append(CsvExporter(args.csv, rebuild_from=earlier))
    if args.oss_json is not None:
        sinks.append(OssJsonExporter(args.oss_json, header, rebuild_from=earlier))
    from param_compute.results.targets import Verdicts

    verdicts = Verdicts()  # missed targets and --verify failures decide the exit status too
    sinks += [verdicts] + step_sinks(args, spec, toolchain, options, sinks[0])  # checked now
    batches = None
    if nsight is not None:  # writes its batch lines through the results sink (sinks[0])
        batches = BatchProfiler(nsight, spec, options, path, sinks[0], toolchain.workloads_dirs)
        if resume is not None:  # runs measured before a kill but never profiled: again
            from param_compute.profiling.batches import unprofiled_runs

            batches.requeue = unprofiled_runs(path)
            if batches.requeue:
                log.info("%d runs measured before the last attempt ended were not profiled: "
                         "profiling them now", len(batches.requeue))
        sinks.append(batches)
    refused = {}
    if not options.isolate and not options.dry_run:  # a crashing config is not rerun on resume
        from param_compute.runtime.crash_marker import CrashMarker, crash_message, previous_crash

        crashed = previous_crash(path) if resume is not None else None
        if crashed is not None and crashed[0] not in resume.completed:
            log.warning("%s crashed the previous attempt (%s): recorded as an error, not run "
                        "again", crashed[0], crashed[1])
            refused[crashed[0]] = crash_message(crashed[1])
        sinks.append(CrashMarker(path))
    engine = Engine(spec, options, toolchain, sinks, run_filters)
    engine.refused.update(refused)
    if resume is not None:
        resume.report()
    GUARD.install()
    if cupti is not None:
        warm_up_kineto()
    with profiled(path, options.profile, options.execution_trace, options.device,
                  cupti.experimental_config() if cupti is not None else None) as written:
        summary = engine.run()
    for name, file in written.items():
        log.info("%s: %s", name.replace("_", " "), file)
    if cupti is not None and "trace_file" in written:
        write_cupti_summary(path, Path(written["trace_file"]), cupti)
    status = batches.exit_status(summary) if batches is not None else summary.exit_status
    return verdicts.exit_status(status, args.fail_on_target_miss)


if __name__ == "__main__":
    sys.exit(main())

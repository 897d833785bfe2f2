"""``python -m param_compute.run_benchmark -c spec.json``: validate, expand, run, write results.

Exit status: 0 every run measured; 1 some run failed (its error record is in the results);
2 invalid spec or options (nothing runs, no results file is created).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import List, Optional

from .errors import EXIT_INVALID, EXIT_RUN_FAILED, OptionsError, SpecError
from .options import RunOptions
from .signals import Interrupted
from .timing import ExecMode

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
    p.add_argument("--cuda-l2-cache", choices=["on", "off"], default="off",
                   help="off (default): flush the L2 cache before each discrete iteration; "
                        "on: keep it warm")
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
    p.add_argument("--workloads-dir", type=Path, action="append", default=[],
                   help="import every .py in DIR as a workload module (repeatable)")
    p.add_argument("--list-ops", action="store_true",
                   help="list registered workloads and the resolvable namespaces, then exit")
    p.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    p.add_argument("-l", "--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log level (DEBUG also prints tracebacks)")
    p.add_argument("-v", "--verbose", action="store_true", help="same as --log-level DEBUG")
    from .nsight import add_arguments as add_nsight_arguments

    add_nsight_arguments(p)  # --ncu, --nsys, --run-batch-size, ...
    return p


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

    from .resolution import ALLOWED_FORMS

    console = Console()
    regs = toolchain.registries
    console.print(f"[bold]Registered operators ({len(regs.operators)})[/bold]")
    for name in sorted(regs.operators):
        console.print(f"  {name}")
    for name, why in sorted(regs.unavailable_operators.items()):
        console.print(f"  {name}  [yellow](unavailable: {why})[/yellow]")
    console.print(f"[bold]Also resolvable by name[/bold]: {ALLOWED_FORMS}")
    console.print(f"[bold]Config iterators[/bold]: {', '.join(sorted(regs.config_iterators))}")
    console.print(f"[bold]Data generators[/bold]: {', '.join(sorted(regs.data_generators))}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = "DEBUG" if args.verbose else args.log_level
    _setup_logging(level)
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


def _main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .console import ConsoleReporter
    from .devices import check_device
    from .exporters import CsvExporter, OssJsonExporter
    from .memory_guard import parse_size
    from .nsight import BatchProfiler, settings_from_args
    from .profiling import profiled, trace_paths
    from .resume import scan_results, spec_digest
    from .session import Toolchain
    from .sharding import plan_shard, resolve_shard
    from .signals import GUARD
    from .sysinfo import sys_info
    from .writers import JsonlResultWriter

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
    options = RunOptions(device=args.device, warmup=args.warmup, iteration=args.iteration,
                         backward=args.backward, exec_mode=ExecMode(args.exec_mode),
                         num_threads=args.num_threads, seed=args.seed,
                         resume_id=args.resume_id, stop_id=args.stop_id,
                         dry_run=args.dry_run, min_time=args.min_time,
                         max_iteration=args.max_iteration,
                         cuda_l2_cache=args.cuda_l2_cache == "on",
                         throughput=not args.no_throughput, pt2_model=args.pt2_model,
                         cuda_graph=args.cuda_graph, profile=args.profile,
                         execution_trace=args.et, fail_fast=args.fail_fast,
                         max_memory=("auto" if args.max_memory == "auto"
                                     else parse_size(args.max_memory)),
                         isolate=args.isolate, timeout=args.timeout).check()
    if args.resume and (args.output is None or args.append):
        raise OptionsError("--resume needs --output PATH (and no --append): it continues the "
                           "run in that file")
    if not options.dry_run:
        check_device(options.device)
    nsight = settings_from_args(args, options)  # --ncu/--nsys: binaries found before any run
    spec = toolchain.load(args.config)
    digest = spec_digest(args.config)
    resume = None
    if args.resume:
        resume = scan_results(args.output)
        resume.check_matches(digest, options.dry_run)

    start = datetime.now()
    path = _results_path(args, start)
    run_options = options.to_json()
    run_options["config_file"] = str(args.config)
    run_options["spec_sha256"] = digest
    run_options["benchmark_args"] = {k: (str(v) if isinstance(v, Path) else v)
                                     for k, v in vars(args).items()
                                     if k != "workloads_dir"}
    run_options["benchmark_args"]["workloads_dir"] = [str(d) for d in args.workloads_dir]
    header = {"run_options": run_options,
              "sys_info": sys_info(options.device, include_torch=True),
              "start_time": start.isoformat(timespec="seconds")}
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
             ConsoleReporter(str(path), progress=False if args.no_progress else None)]
    if args.csv is not None:
        sinks.append(CsvExporter(args.csv))
    if args.oss_json is not None:
        sinks.append(OssJsonExporter(args.oss_json, header))
    batches = None
    if nsight is not None:  # before the writer: a batch's record precedes the next run's
        batches = BatchProfiler(nsight, spec, options, path, sinks[0], toolchain.registries)
        sinks.insert(0, batches)
    if resume is not None and resume.completed:
        log.info("resuming %s: %d runs already done%s", path, len(resume.completed),
                 ", dropping a torn last line" if resume.torn_line else "")
    GUARD.install()
    with profiled(path, options.profile, options.execution_trace, options.device) as written:
        summary = toolchain.engine(spec, options, sinks, run_filters).run()
    for name, file in written.items():
        log.info("%s: %s", name.replace("_", " "), file)
    return batches.exit_status(summary) if batches is not None else summary.exit_status


if __name__ == "__main__":
    sys.exit(main())

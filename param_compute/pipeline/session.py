"""The session: the only place a run is assembled, whichever door it came through.

``Session.build(spec, options, outputs)`` turns ``RunOptions`` (what is measured and how) and an
``OutputPlan`` (where results go) into a ready run, in this order: the shard and the options'
checks, the toolchain (plugin folders, namespaces), the validated spec, the checked and locked
outputs, the typed header, the run filters (resume, shard), the sinks (results file, console,
CSV, OSS JSON, verdicts, profilers, crash marker, the caller's) and the engine. ``run()``
measures and returns a :class:`RunResult` with the exit status. The command line
(``cli.run_benchmark``), ``param_compute.run`` and PARAM's library door (``lib``) all build
sessions, so they write the same files with the same options.

The session owns its results-file lock (released by ``close``, which ``run`` calls).
``owns_process`` (the command line) also installs the signal guard and freezes start-up objects
out of the garbage collector's walks; a library caller's process is left as found
(``runtime.process_state``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

from param_compute.errors import OptionsError
from param_compute.pipeline.capture_settings import follow_capture
from param_compute.pipeline.loading import SpecInput, load_spec
from param_compute.pipeline.outputs import OutputPlan, RunHeader, command_line_values
from param_compute.results.sinks.base import RecordSink, RunSummary
from param_compute.runtime.options import RunOptions

log = logging.getLogger("param_compute")


@dataclass
class RunResult:
    """What a run gave: its summary, exit status, results file and header, and (when the
    output plan collects them) every record's JSON form."""

    summary: RunSummary
    exit_status: int
    records: List[Dict[str, Any]] = field(default_factory=list)
    path: Optional[Path] = None
    header: Optional[Dict[str, Any]] = None


class Session:
    """A run assembled and ready: see the module's doc. Build it with :meth:`build`."""

    def __init__(self, options: RunOptions, outputs: OutputPlan, owns_process: bool):
        self.options = options
        self.outputs = outputs
        self.owns_process = owns_process
        self.locks: List[Any] = []
        self.shard = None
        self.toolchain = None
        self.spec = None
        self.spec_path: Optional[Path] = None
        self.digest = ""
        self.path: Optional[Path] = None
        self.csv: Optional[Path] = outputs.csv
        self.oss_json: Optional[Path] = outputs.oss_json
        self.header: Optional[Dict[str, Any]] = None
        self.resume = None
        #: The parts of run selection the session learns (``plan.selection``).
        self.run_filter = None
        self.shard_plan = None
        self.sinks: List[RecordSink] = []
        self.collector = None
        self.nsight = None
        self.cupti = None
        self.engine = None
        self.step_run = None  # --replay-step: the step replay's run (``runtime.step_run``)
        #: A job (``plan.job``): this process's rank, and its part of the plan.
        self.job_rank = None
        self.job_plan = None

    @classmethod
    def build(cls, spec: SpecInput, options: Optional[RunOptions] = None,
              outputs: Optional[OutputPlan] = None, *, nsight: Any = None, cupti: Any = None,
              sinks: Iterable[Any] = (), cmd_args: Optional[Dict[str, Any]] = None,
              owns_process: bool = False, toolchain: Any = None) -> "Session":
        """Assemble a run (see the module's doc). ``nsight``/``cupti``: checked profiler
        settings (``profiling.nsight.BatchSettings``, ``profiling.cupti.CuptiSettings``);
        ``sinks``: the caller's, after the session's own; ``cmd_args``: the header's
        ``cmd_args`` (the command line's values; by default what the flags of these options
        would be). Raises ``SpecError`` / ``OptionsError``; nothing is written then."""
        outputs = (outputs or OutputPlan()).check()
        session = cls(options or RunOptions(), outputs, owns_process)
        session.nsight, session.cupti = nsight, cupti
        try:
            session._prepare(toolchain)
            session._load(spec)
            session._resolve_job()
            session._claim_outputs()
            session._make_header(cmd_args)
            session._plan_step()
            session._make_filters()
            session._make_sinks(sinks)
        except BaseException:
            session.close()
            raise
        from param_compute.runtime.engine import Engine

        session.engine = Engine(session.spec, session.options, session.toolchain, session.sinks,
                                session._selection(), session._refused(), session._journal(),
                                extra_runs=[session.step_run] if session.step_run else (),
                                job=session.job_plan)
        return session

    # -- assembly -------------------------------------------------------------------------

    def _prepare(self, toolchain: Any) -> None:
        """Shard and option checks, device, peaks (the toolchain starts with the spec)."""
        from param_compute.plan.sharding import resolve_shard

        self.shard = resolve_shard(self.outputs.shard)  # --shard I/N or torchrun
        options = self.options
        if self.shard is not None:  # its own device: a bare cuda is this rank's GPU
            options = dataclasses.replace(options, device=self.shard.device(options.device))
        self.options = options.check()
        if not options.dry_run:
            from param_compute.measure.devices import check_device

            check_device(options.device)
        if options.peaks or (options.throughput and not options.dry_run):
            from param_compute.measure.calibrate import peaks_for_run

            # A bad peaks file (or cache) is bad input: said before anything runs.
            peaks_for_run(options.device, options.num_threads, options.peaks)
        self.toolchain = toolchain

    def _load(self, spec: SpecInput) -> None:
        """The spec read, hashed and validated (``pipeline.loading``): a dry run without torch
        where it can. The options then name the toolchain's plugin folders and namespaces: a
        child process rebuilds it from them."""
        loaded = load_spec(spec, self.options, self.toolchain, self.owns_process)
        self.toolchain, self.spec = loaded.toolchain, loaded.spec
        self.spec_path, self.digest = loaded.path, loaded.digest
        # A captured spec's recorded device and threads: warned about, or followed.
        self.options = follow_capture(self.spec, self.toolchain.complete(self.options),
                                      self.options.match_capture)

    def _resolve_job(self) -> None:
        """A job (collectives, or ``__process_groups__``: ``plan.job``) is not sharded: this
        process runs its own rank's part; a world size other than the job's is refused."""
        from param_compute.plan.job import JobPlan, is_job, resolve_rank

        if not is_job(self.spec):
            return
        options = self.options
        if self.shard is not None and self.shard.source == "--shard":
            raise OptionsError("--shard: a job (a spec with collectives or __process_groups__) "
                               "is not sharded: every rank runs its own part of it")
        for given, name in ((options.isolate and options.timeout is None, "--isolate"),
                            (options.timeout is not None, "--timeout (use --dist-timeout)"),
                            (options.repetitions > 1, "--repetitions")):
            if given:
                raise OptionsError(f"{name}: a job's collectives run in each rank's own "
                                   "process, with its process groups; drop it")
        if self.outputs.resume:
            raise OptionsError("--resume: each rank of a job would skip what its own file "
                               "holds and wait in collectives its peers skip; run the job "
                               "again")
        self.shard = None
        source = str(self.spec_path) if self.spec_path else self.spec.source
        self.job_rank = resolve_rank(self.spec, source, dry_run=options.dry_run)
        self.job_plan = JobPlan(self.spec, self.job_rank)

    def _claim_outputs(self) -> None:
        """Every output checked and the results file locked, before anything is written."""
        from param_compute.files import check_outputs, lock_results, unused_name

        path = self.outputs.results_path(datetime.now())
        if self.shard is not None and path is not None:  # out.json -> out.shard0of2.json
            path = self.shard.path(path)
            self.csv = self.csv and self.shard.path(self.csv)
            self.oss_json = self.oss_json and self.shard.path(self.oss_json)
        elif self.job_rank is not None and path is not None:  # out.json -> out.rank0of2.json
            path = self.job_rank.path(path)
            self.csv = self.csv and self.job_rank.path(self.csv)
            self.oss_json = self.oss_json and self.job_rank.path(self.oss_json)
        elif self.outputs.output is None and path is not None:
            path = unused_name(path)  # a predictable default name never lands on a file
        if path is None and (self.options.profile or self.options.execution_trace):
            raise OptionsError("-p/--profile and --et write their traces beside the results "
                               "file: give an output")
        journal = None
        if self.options.repetitions > 1 and not self.options.dry_run:
            from param_compute.runtime.repetition_journal import journal_for

            journal = journal_for(path)
        check_outputs({"--output": path, "--csv": self.csv, "--oss-json": self.oss_json,
                       "--repetitions journal": journal},
                      {"-c/--config spec": self.spec_path,
                       "--peaks": Path(self.options.peaks) if self.options.peaks else None})
        if path is not None:
            self.locks.append(lock_results(path))
        self.path = path

    def _make_header(self, cmd_args: Optional[Dict[str, Any]]) -> None:
        from param_compute.runtime.sysinfo import sys_info

        if cmd_args is None:
            cmd_args = command_line_values(self.options, self.outputs)
        shard_header = None
        if self.shard is not None:
            from param_compute.plan.sharding import plan_shard

            shard_plan = plan_shard(self.spec, self.toolchain.registries, self.options.device,
                                    self.shard)
            shard_header = shard_plan.header()
            self.shard_plan = shard_plan
            log.info("shard %d of %d (%s): %d of %d runs, %.0f%% of the estimated cost",
                     self.shard.index, self.shard.count, self.shard.source,
                     len(shard_plan.keys), shard_plan.total_runs,
                     100 * shard_plan.cost / (shard_plan.total_cost or 1))
        self.header = RunHeader(
            self.options, str(self.spec_path) if self.spec_path else self.spec.source,
            self.digest, sys_info(self.options.device, include_torch=not self.options.dry_run,
                                  num_threads=self.options.num_threads),
            datetime.now().isoformat(timespec="seconds"), cmd_args, shard_header).to_json()
        if self.job_rank is not None:  # every rank's file says which rank of which job
            self.header["job"] = self._job_header()

    def _job_header(self) -> Dict[str, Any]:
        from param_compute.plan.job import job_world_size

        groups = (self.spec.process_groups or {}).get("groups") or {}
        out = {**self.job_rank.header(), "captured_world_size": job_world_size(self.spec),
               "groups": {name: list(group.get("ranks") or []) for name, group in
                          groups.items()}}
        if not self.options.dry_run:
            from param_compute.runtime.job import backend_for

            out["backend"] = backend_for(self.options.device, self.options.dist_backend)
        return out

    def _selection(self):
        """The one selection of runs (``plan.selection``): the id window, the runs a resumed
        file holds, the filter, the shard."""
        from param_compute.plan.selection import Selection

        return Selection(self.options.resume_id, self.options.stop_id,
                         self.resume.completed if self.resume is not None else (),
                         self.run_filter, self.shard_plan,
                         self.shard.index if self.shard is not None else 0)

    def _plan_step(self) -> None:
        """``--replay-step``: the step file read and checked against the spec now (a bad one,
        or one of another spec, is invalid input, exit 2, before anything runs; a stale one is
        warned about); its run joins the plan."""
        if not self.options.replay_step:
            return
        from param_compute.runtime.step_run import check_step_spec, load_step, step_run

        path, step, _ = load_step(self.spec_path, self.options.step_file, self.spec,
                                  self.toolchain.registries.config_iterators,
                                  self.options.device, self.job_plan)
        marks = check_step_spec(path, step, self.spec_path, self.digest,
                                explicit=self.options.step_file is not None)
        self.step_run = step_run(path, step, marks)

    def _make_filters(self) -> None:
        """``--only``/``-k``/``--input-id`` (``plan.filters``; one that selects nothing is an
        error) and ``--resume``: the file's runs are skipped, once its header matches this
        run's."""
        from param_compute.plan.filters import FilterError, RunFilter, check_selection
        from param_compute.plan.runplan import plan_runs

        selection = RunFilter.from_options(self.options)
        if selection:
            try:
                check_selection(selection, plan_runs(
                    self.spec, self.toolchain.registries.config_iterators, self.options.device))
            except FilterError as exc:
                raise OptionsError(str(exc)) from None
            self.run_filter = selection
        if not self.outputs.resume:
            return
        from param_compute.results.resume import scan_results

        self.resume = scan_results(self.path)
        self.resume.check_matches(self.digest, self.options.dry_run,
                                  self.header["run_options"], self.outputs.resume_mixed,
                                  self.header["sys_info"])

    def _make_sinks(self, extra: Iterable[Any]) -> None:
        from param_compute.results.sinks.base import as_sink
        from param_compute.results.sinks.verdicts import Verdicts

        sinks: List[RecordSink] = []
        if self.path is not None:
            sinks.append(self._results_writer())
        if self.outputs.console:
            from param_compute.results.sinks.console import ConsoleReporter, protocol_advice

            sinks.append(ConsoleReporter(
                str(self.path) if self.path else None, progress=self.outputs.progress,
                max_rows=self.outputs.max_rows, sort=self.outputs.sort,
                protocol=protocol_advice(self.options.protocol, self.options.warmup,
                                         self.options.iteration, self.options.warmup_time,
                                         self.options.min_time),
                # a job's ranks share a terminal: rank 0 prints the tables
                quiet=self.outputs.quiet or bool(self.job_rank and self.job_rank.rank)))
        if self.outputs.collect:
            from param_compute.results.sinks.jsonl import RecordCollector

            self.collector = RecordCollector()
            sinks.append(self.collector)
        sinks += self._exports()
        # Missed targets and --verify failures decide the exit status too.
        sinks.append(Verdicts(self.outputs.fail_on_target_miss))
        if self.job_rank is not None and self.outputs.console and not self.outputs.quiet \
                and not self.job_rank.rank:
            from param_compute.results.sinks.comms import CommsSummary

            sinks.append(CommsSummary())
        if self.step_run is not None:
            from param_compute.results.sinks.step import StepSummary

            sinks.append(StepSummary(self.step_run.input["calls"], self.options.host_gaps,
                                     self.options.dry_run))
        if self.nsight is not None:
            sinks.append(self._batch_profiler())
        if self.path is not None and not self.options.isolate and not self.options.dry_run \
                and self.options.repetitions == 1:  # runs measured in workers need no marker
            from param_compute.runtime.crash_marker import CrashMarker

            sinks.append(CrashMarker(self.path))
        self.sinks = sinks + [as_sink(sink) for sink in extra]

    def _results_writer(self) -> RecordSink:
        from param_compute.profiling.traces import trace_paths
        from param_compute.results.sinks.jsonl import JsonlResultWriter

        traces = {name: str(file) for name, file in trace_paths(self.path).items()
                  if (name == "trace_file" and self.options.profile)
                  or (name == "et_file" and self.options.execution_trace)}
        return JsonlResultWriter(self.path, self.header, append=self.outputs.append,
                                 finish_extra=traces, resume=self.resume)

    def _exports(self) -> List[RecordSink]:
        """CSV and OSS JSON; on resume or append they are rebuilt from the earlier runs too."""
        if self.csv is None and self.oss_json is None:
            return []
        from param_compute.results.sinks.export import CsvExporter, OssJsonExporter

        earlier = self.path if (self.resume is not None or self.outputs.append) else None
        sinks: List[RecordSink] = []
        if self.csv is not None:
            sinks.append(CsvExporter(self.csv, rebuild_from=earlier))
        if self.oss_json is not None:
            sinks.append(OssJsonExporter(self.oss_json, self.header, rebuild_from=earlier))
        return sinks

    def _batch_profiler(self) -> RecordSink:
        from param_compute.profiling.batches import BatchProfiler, unprofiled_runs

        if self.path is None:
            raise OptionsError("--ncu/--nsys write their profiles beside the results file: "
                               "give an output")
        requeue = unprofiled_runs(self.path) if self.resume is not None else set()
        if requeue:  # runs measured before a kill but never profiled: again
            log.info("%d runs measured before the last attempt ended were not profiled: "
                     "profiling them now", len(requeue))
        return BatchProfiler(self.nsight, self.spec, self.options, self.path, requeue)

    def _journal(self) -> Any:
        """``--repetitions`` with a results file: the journal keeping every measurement as it
        comes (``runtime.repetition_journal``), read back on ``--resume``."""
        if self.options.repetitions <= 1 or self.options.dry_run:
            return None
        from param_compute.runtime.repetition_journal import RepetitionJournal, journal_for

        if journal_for(self.path) is None:
            return None
        return RepetitionJournal(self.path, resume=self.resume is not None)

    def _refused(self) -> Dict[str, str]:
        """A config that crashed the previous attempt is recorded as an error, not rerun."""
        if self.resume is None or self.options.isolate or self.options.dry_run \
                or self.options.repetitions > 1:
            return {}
        from param_compute.runtime.crash_marker import crash_message, previous_crash

        crashed = previous_crash(self.path)
        if crashed is None or crashed[0] in self.resume.completed:
            return {}
        log.warning("%s crashed the previous attempt (%s): recorded as an error, not run "
                    "again", crashed[0], crashed[1])
        return {crashed[0]: crash_message(crashed[1])}

    # -- running ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Measure (or plan) every selected run; the lock is released at the end."""
        from param_compute.process.signals import GUARD
        from param_compute.runtime.process_state import preserved

        try:
            if self.resume is not None:
                self.resume.report()
            if self.owns_process:
                GUARD.install()
            with preserved(import_torch=not self.options.dry_run):
                summary = self._measure()
        finally:
            self.close()
        status = summary.exit_status
        for final_status in self.engine.hooks.final_status:
            status = final_status(status)
        return RunResult(summary, status, self.collector.records if self.collector else [],
                         self.path, self.header)

    def _measure(self) -> RunSummary:
        from param_compute.profiling.traces import profiled

        cupti = self.cupti
        if cupti is not None:
            from param_compute.profiling.cupti import warm_up_kineto

            warm_up_kineto()
        with profiled(self.path, self.options.profile, self.options.execution_trace,
                      self.options.device,
                      cupti.experimental_config() if cupti is not None else None) as written:
            summary = self.engine.run()
        for name, file in written.items():
            log.info("%s: %s", name.replace("_", " "), file)
        if cupti is not None and "trace_file" in written:
            from param_compute.profiling.cupti import write_summary

            write_summary(self.path, Path(written["trace_file"]), cupti)
        return summary

    def close(self) -> None:
        """Release the results-file lock (idempotent)."""
        while self.locks:
            self.locks.pop().release()


def run(spec: SpecInput, options: Optional[RunOptions] = None,
        workloads_dirs: Iterable[Any] = (), sinks: Iterable[Any] = (), *,
        output: Optional[Union[str, os.PathLike]] = None, resume: bool = False,
        resume_mixed: bool = False, append: bool = False,
        csv: Optional[Union[str, os.PathLike]] = None,
        oss_json: Optional[Union[str, os.PathLike]] = None, shard: Optional[str] = None,
        fail_on_target_miss: bool = False, console: bool = False,
        **option_values: Any) -> RunResult:
    """Validate and run a spec in-process, as the command line does; return its records (JSON
    form), summary and exit status.

    ``spec`` is a spec dict or a path; options come as a ``RunOptions`` or as keyword arguments
    (``warmup=2, iteration=10, backward=True, verify="eager", allow_namespaces=["fbgemm"]``);
    ``workloads_dirs`` are plugin folders for this run only. The output keywords are the
    command line's flags: ``output="r.json"`` writes the results file the command line would
    (``resume=True`` continues it), ``csv``/``oss_json`` the exports, ``shard="0/2"`` a slice.
    Raises ``SpecError`` for an invalid spec, ``OptionsError`` for unusable options.
    """
    options = options or RunOptions(**option_values)
    if workloads_dirs:
        options = dataclasses.replace(
            options, workloads_dirs=(*options.workloads_dirs, *map(str, workloads_dirs)))
    outputs = OutputPlan(output=Path(output) if output is not None else None, append=append,
                         resume=resume, resume_mixed=resume_mixed,
                         csv=Path(csv) if csv is not None else None,
                         oss_json=Path(oss_json) if oss_json is not None else None, shard=shard,
                         fail_on_target_miss=fail_on_target_miss, progress=False,
                         console=console, collect=True)
    return Session.build(spec, options, outputs, sinks=sinks).run()

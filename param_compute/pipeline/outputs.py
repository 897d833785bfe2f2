"""Where a run's results go: the output plan (flags declared on its fields) and the run header.

``OutputPlan`` is what the command line's output flags say (``--output``, ``--resume``,
``--csv``...) and ``param_compute.run``'s keywords of the same names. ``RunHeader`` is the
typed header of a results file; :meth:`RunHeader.to_json` is its one JSON form, with PARAM
readers' keys beside ours. Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Optional

from param_compute.errors import OptionsError
from param_compute.results.file import header_line
from param_compute.results.records import add_param_header_keys
from param_compute.results.sinks.console import SORT_COLUMNS, SUMMARY_ROWS
from param_compute.results.sinks.console import max_rows as max_rows_value
from param_compute.runtime.flags import flag, flag_fields
from param_compute.runtime.options import RunOptions


def _path(value: Any) -> Path:
    return Path(value)


@dataclass(frozen=True)
class OutputPlan:
    """The results file and exports of a run. No ``output`` and no ``output_prefix``: no
    results file (a library run that only wants its records)."""

    output_prefix: Optional[str] = flag(
        "-o", "--output-prefix", default=None, cli_default="benchmark_result",
        help="results go to PREFIX_PID_TIMESTAMP.json (default benchmark_result)")
    output: Optional[Path] = flag("--output", default=None, type=Path, parse=_path,
                                  help="write results to exactly this file")
    append: bool = flag("-a", "--append", default=False, action="store_true",
                        help="append to the results file instead of overwriting it")
    resume: bool = flag("--resume", default=False, action="store_true",
                        help="with --output: continue an interrupted run in that file, skipping "
                             "the runs already in it")
    resume_mixed: bool = flag(
        "--resume-mixed", default=False, action="store_true",
        help="let --resume continue a file written with other options, device, seed or spec "
             "(refused otherwise: the file would mix settings)")
    csv: Optional[Path] = flag("--csv", default=None, type=Path, parse=_path, metavar="PATH",
                               help="also write a CSV file: one row per run and pass")
    oss_json: Optional[Path] = flag(
        "--oss-json", default=None, type=Path, parse=_path, metavar="PATH",
        help="also write the PyTorch OSS benchmark-database JSON format")
    shard: Optional[str] = flag(
        "--shard", default=None, metavar="I/N",
        help="run shard I of N (cost-balanced slice of the runs; under torchrun RANK/WORLD_SIZE "
             "choose it); results go to OUT.shardIofN.json")
    fail_on_target_miss: bool = flag("--fail-on-target-miss", default=False,
                                     action="store_true",
                                     help="exit 1 when a config's target is missed")
    #: The progress bar: None where stderr is a terminal.
    progress: Optional[bool] = flag("--no-progress", default=None, action="store_const",
                                    const=False, help="no progress bar or progress lines")
    #: No table, no progress, no log lines below WARNING: warnings and errors only.
    quiet: bool = flag("-q", "--quiet", default=False, action="store_true",
                       help="print no table and no progress: warnings and errors only")
    #: The summary table: how many runs it shows (None: all) and in which order.
    max_rows: Optional[int] = flag("--max-rows", default=SUMMARY_ROWS, type=max_rows_value,
                                   metavar="N|all",
                                   help=f"rows of the summary table (default {SUMMARY_ROWS})")
    sort: Optional[str] = flag(
        "--sort", default=None, choices=SORT_COLUMNS, metavar="COLUMN",
        help="summary order: median|n|tflops|gbps (largest first), op|id|config (A-Z)")
    #: Print the summary table (the command line does).
    console: bool = False
    #: Keep every record's JSON form in memory (``RunResult.records``; library use).
    collect: bool = False

    def check(self) -> "OutputPlan":
        if self.resume and (self.output is None or self.append):
            raise OptionsError("--resume needs --output PATH (and no --append): it continues "
                               "the run in that file")
        return self

    @property
    def writes_results(self) -> bool:
        return self.output is not None or self.output_prefix is not None

    def results_path(self, start: datetime) -> Optional[Path]:
        """The results file: ``output``, else ``PREFIX_PID_TIMESTAMP.json``, else None."""
        if self.output is not None:
            return Path(self.output)
        if self.output_prefix is None:
            return None
        return Path(f"{self.output_prefix}_{os.getpid()}_{int(start.timestamp())}.json")


def command_line_values(options: RunOptions, outputs: OutputPlan) -> Dict[str, Any]:
    """What the command line would hold for these settings (the header's ``cmd_args`` of a run
    that did not come from a command line): every flag's field by name, as JSON."""
    values: Dict[str, Any] = {}
    for settings in (options, outputs):
        for name in flag_fields(type(settings)):
            value = getattr(settings, name)
            values[name] = (str(value) if isinstance(value, Path) else
                            list(value) if isinstance(value, tuple) else
                            getattr(value, "value", value))
    return values


@dataclass
class RunHeader:
    """A results file's header."""

    options: RunOptions
    config_file: str
    spec_sha256: str
    sys_info: Dict[str, Any]
    start_time: str
    cmd_args: Dict[str, Any]
    shard: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        """The header line: ``kind`` and ``format_version``, ``run_options`` (the options' JSON
        form, the spec file and its hash, PARAM's ``cmd_args``), ``sys_info``, ``start_time``,
        ``shard`` where sharded."""
        run_options = self.options.to_json()
        run_options["config_file"] = self.config_file
        run_options["spec_sha256"] = self.spec_sha256
        header: Dict[str, Any] = {"run_options": run_options, "sys_info": dict(self.sys_info),
                                  "start_time": self.start_time}
        add_param_header_keys(header, self.cmd_args)
        if self.shard is not None:
            header["shard"] = self.shard
        return header_line(header)  # its kind and the format version first, as written


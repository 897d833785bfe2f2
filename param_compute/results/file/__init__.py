"""The results file: the only code that opens, scans, appends to, repairs or reads one.

A results file is JSON Lines, every line an object that says its kind (``"kind"``, first): a
header ``{"kind": "header", "format_version": 2, run_options, sys_info, start_time, ...}``,
one ``"run"`` record per run ``{op_name, id, status, ...}``, the step replay's ``"step"``
record (a run record, ``op_name`` ``step_replay``, its times the ``step`` pass's, whose
``step`` object holds the replay's details: calls, configs, host gaps, the original's
totals...) and a ``"finish"`` line
``{finish_time, ...}``. Appended files (``-a``) hold several header/finish pairs, resumed files
a ``"resume"`` marker ``{resume_time, ...}``, and ``--ncu``/``--nsys`` runs a ``"batch"`` line
``{ncu_file | nsys_file, ...}`` between run lines.

Format versions: 2 (this one) gives every line its ``kind`` and the header its
``format_version``, and writes the step replay as a step record. Version 1 (no
``format_version``: our files before, and PARAM's) is still read: a line without a ``kind``
has it guessed from its keys as before (``schema.line_kind``, only there), and an old
``{"step_replay": {...}}`` line is read as the step record it would be today
(``schema.upgraded``: its ``stats`` and ``step_ms`` as the ``step`` pass's, the rest under
``step``).

Reading is typed: :class:`ResultsStream` yields each line with its number and kind
(``lines()``; iterating it yields the records, the step record included), memory by runs;
:func:`read_results` the whole file; :func:`scan_lines`; :class:`LineReader` a line back at a
known offset; :func:`file_digest` the hash of its bytes. It is bounded: only regular files are opened (a
directory, FIFO or device such as ``/dev/zero`` is refused with :class:`ResultsFileError`,
through ``files.open_regular``) and a line longer than ``max_line_bytes`` (64 MiB) is skipped
without being held in memory. The first line must be a header; any other line that can't be
used (not UTF-8, not JSON, not an object, too long, nested too deeply, of an unknown kind, a
field of the wrong type where the tools compute with it, a garbled step record: see
``schema.py``) is a :class:`LineProblem` with its line number: reported (``FILE:LINE: what``),
never a reason to drop the lines around it.

The one torn-line rule: only the *last* line can be torn, and it is torn when it has no line
break and is not a whole JSON object (a run killed mid-write). :func:`repair_tail` cuts a torn
last line off (and says what it cut) and ends a whole last line that lacks its line break, so
appending never glues two lines together. Nothing else ever shortens a results file.

Times are read in milliseconds, the unit written: a header declaring another
(``run_options.time_unit`` ``"microsecond"``, ``"s"``...) has its run's records converted as they
are read, and one declaring a unit not known is refused naming its line (``units.py``).

Writing (:class:`ResultsWriter`): each line is one encoded line, written whole through
``files.LineFile`` (never through a link; a full disk leaves no torn line; unflushed lines,
such as dry-run records, handed over a batch of whole lines at a time); the sync policy says
when lines reach the disk (see ``SYNC_*``). Torch-free.
"""

from param_compute.results.fields import (measured_passes, pass_samples,
                                          pass_throughput, peak_memory_mb)
from param_compute.results.file.reading import (MAX_LINE_BYTES, Line, LineProblem,
                                                LineReader, ResultsFile, ResultsFileError,
                                                ResultsStream, iter_results, load_results,
                                                open_results, read_results,
                                                read_results_warned, scan_lines,
                                                stream_results, warn_problem)
from param_compute.results.file.digest import file_digest
from param_compute.results.file.schema import (BATCH, FINISH, FORMAT_VERSION, HEADER, KINDS,
                                               OTHER, RECORD, RECORDS, RESUME, RUN, STEP,
                                               STEP_PASS, line_kind, schema_problem, upgraded)
from param_compute.results.file.writing import (SYNC_ENDS, SYNC_EVERY, SYNC_NONE,
                                                ResultsWriter, encode_line, encode_text,
                                                encode_value, header_line, repair_tail,
                                                with_kind, write_results)

__all__ = ["BATCH", "FINISH", "FORMAT_VERSION", "HEADER", "KINDS", "MAX_LINE_BYTES", "OTHER",
           "RECORD", "RECORDS", "RESUME", "RUN", "STEP", "STEP_PASS", "SYNC_ENDS", "SYNC_EVERY",
           "SYNC_NONE", "Line", "LineProblem", "LineReader", "ResultsFile", "ResultsFileError",
           "ResultsStream", "ResultsWriter", "encode_line", "encode_text", "encode_value",
           "file_digest", "header_line", "iter_results", "line_kind", "load_results",
           "measured_passes", "open_results", "pass_samples", "pass_throughput",
           "peak_memory_mb", "read_results", "read_results_warned", "repair_tail", "scan_lines",
           "schema_problem", "stream_results", "upgraded", "warn_problem", "with_kind",
           "write_results"]

"""The results file: the only code that opens, scans, appends to, repairs or reads one.

A results file is JSON Lines: a header ``{run_options, sys_info, start_time, ...}``, one line per
run ``{op_name, id, status, ...}`` and a finish line ``{finish_time, ...}``. Appended files
(``-a``) hold several header/finish pairs, resumed files a ``{resume_time, ...}`` marker, and
``--ncu``/``--nsys`` runs a batch line ``{ncu_file | nsys_file, ...}`` between run lines.

Reading (:class:`ResultsStream` one record at a time, memory by runs; :func:`read_results`
the whole file; :func:`scan_lines`; :class:`LineReader` a line back at a known offset;
:func:`file_digest` the hash of its bytes) is
bounded: only regular files are opened (a directory, FIFO or device such as ``/dev/zero`` is
refused with :class:`ResultsFileError`) and a line longer than ``max_line_bytes`` (64 MiB) is
skipped without being held in memory. The first line must be a header; any other line that
can't be used (not UTF-8, not JSON, not an object, too long, nested too deeply, a field of the
wrong type where the tools compute with it: see ``schema.py``) is a :class:`LineProblem` with
its line number: reported, never a reason to drop the lines around it.

The one torn-line rule: only the *last* line can be torn, and it is torn when it has no line
break and is not a whole JSON object (a run killed mid-write). :func:`repair_tail` cuts a torn
last line off (and says what it cut) and ends a whole last line that lacks its line break, so
appending never glues two lines together. Nothing else ever shortens a results file.

Writing (:class:`ResultsWriter`): each line is encoded whole and written whole (unflushed lines,
such as dry-run records, a batch of whole lines per ``write`` call); the sync policy says when
lines reach the disk (see ``SYNC_*``). Torch-free.
"""

from param_compute.results.fields import (measured_passes, pass_samples,
                                          pass_throughput, peak_memory_mb)
from param_compute.results.file.reading import (MAX_LINE_BYTES, Line, LineProblem,
                                                LineReader, ResultsFile, ResultsFileError,
                                                ResultsStream, iter_results, load_results,
                                                read_results, read_results_warned,
                                                scan_lines, stream_results, warn_problem)
from param_compute.results.file.digest import file_digest
from param_compute.results.file.schema import (FINISH, HEADER, OTHER, RECORD, RESUME,
                                               line_kind, schema_problem)
from param_compute.results.file.writing import (SYNC_ENDS, SYNC_EVERY, SYNC_NONE,
                                                ResultsWriter, encode_line, encode_text,
                                                encode_value, repair_tail, write_results)

__all__ = ["FINISH", "HEADER", "MAX_LINE_BYTES", "OTHER", "RECORD", "RESUME", "SYNC_ENDS",
           "SYNC_EVERY", "SYNC_NONE", "Line", "LineProblem", "LineReader", "ResultsFile",
           "ResultsFileError", "ResultsStream", "ResultsWriter", "encode_line", "encode_text",
           "encode_value", "file_digest", "iter_results", "line_kind", "load_results",
           "measured_passes", "pass_samples", "pass_throughput", "peak_memory_mb", "read_results",
           "read_results_warned", "repair_tail", "scan_lines", "schema_problem", "stream_results",
           "warn_problem", "write_results"]

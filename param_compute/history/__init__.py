"""The results history: every run kept in a database, steps found at the label that caused them.

``python -m param_compute.history add RESULTS.json --label L`` ingests a results file into a
store (SQLite by default, PostgreSQL through ``--db postgresql://...``); ``show`` prints each
series (machine, op, config, pass) with a sparkline, ``check`` fails on regressions found by
step detection, ``report`` writes a static HTML dashboard. Modules: ``backends`` (connections,
one SQL dialect), ``schema`` (tables, version), ``store`` (reads and writes), ``identity`` (the
machine and the default label of a results file), ``ingest``, ``series``, ``select``
(``--only``/``-k``), ``steps`` (change points), ``show``, ``check``, ``report`` with ``plot``.
Torch-free.
"""

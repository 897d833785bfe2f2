"""One assembly of a run, behind every door: the command line, ``param_compute.run`` and PARAM's
library build the same :class:`~param_compute.pipeline.session.Session` from ``RunOptions`` and
an ``OutputPlan``, and get the same results file."""

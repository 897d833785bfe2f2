"""Built-in workloads, installed as ``param_compute.workloads``.

Every module below this package is imported at start-up by the plugin loader and registers its
operators, config iterators and data generators as a side effect, the way PARAM's workloads do.
"""

"""Command-line tools around results files: ``ncu_report`` and ``nsys_report`` join the Nsight
profiles of ``--ncu``/``--nsys`` batches back to run ids. Torch-free."""

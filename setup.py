from setuptools import find_packages, setup

# The built-in workloads live in the top-level `workloads/` folder of the repository (as the
# product layout asks) but are installed as `param_compute.workloads`, never as a generic
# top-level package named `workloads`.
setup(
    name="param_compute",
    version="0.2.0",
    description="PyTorch operator benchmark engine that replays JSON operator specs (PARAM-compatible)",
    python_requires=">=3.10",
    packages=(find_packages(include=["param_compute", "param_compute.*"])
              + ["param_compute.workloads"]
              + ["param_compute.workloads." + name for name in find_packages("workloads")]),
    package_dir={"param_compute.workloads": "workloads"},
    package_data={"param_compute.spec": ["*.json"]},
    # one command, param-compute COMMAND; each is also python -m param_compute.X (PARAM's doors)
    entry_points={"console_scripts": ["param-compute = param_compute.cli.main:main"]},
    install_requires=["torch", "jsonschema>=4.18", "rich>=13", "nvtx>=0.2.5", "matplotlib>=3.7"],
    extras_require={"fbgemm": ["fbgemm-gpu-cpu==1.8.0"],
                    # GPU clocks and throttle reasons per sample (NVML)
                    "gpu": ["nvidia-ml-py"],
                    # python -m param_compute.history --db postgresql://...
                    "postgres": ["psycopg[binary]>=3.1"],
                    "test": ["pytest>=7", "hypothesis>=6"]},
)

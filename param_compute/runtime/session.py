"""The toolchain under its older import path (``from param_compute.runtime.session import
Toolchain``). A library run is assembled by ``param_compute.pipeline.session`` (``Session``,
``run``), the same assembly the command line uses."""

from param_compute.runtime.toolchain import Toolchain

__all__ = ["Toolchain"]

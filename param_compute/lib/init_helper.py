"""PARAM's ``lib.init_helper``: logging set-up and importing every module of a plugin package."""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
from types import ModuleType

#: The engine's logger: PARAM scripts configuring logging here configure the engine's messages.
LOGGER_NAME = "param_compute"


def init_logging(log_level: int) -> logging.Logger:
    """Configure the logger once more (handlers replaced, not added) and return it: PARAM's
    format, with file and line at DEBUG."""
    detail = " %(filename)s:%(lineno)-3d" if log_level == logging.DEBUG else ""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(log_level)
    handler.setFormatter(logging.Formatter(
        f"[%(asctime)s] %(process)d{detail} [%(levelname)s]: %(message)s"))
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(log_level)
    logger.handlers[:] = [handler]
    logger.propagate = False
    return logger


def get_logger() -> logging.Logger:
    """The logger, set up at INFO on first use if nothing configured it."""
    logger = logging.getLogger(LOGGER_NAME)
    return logger if logger.handlers else init_logging(logging.INFO)


def load_modules(package: ModuleType) -> None:
    """Import every module of ``package`` (not recursive), so their ``register_*`` calls run;
    a module whose import needs a missing module is skipped with a warning."""
    logger = get_logger()
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        logger.debug("loading module: %s", info.name)
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            logger.warning("failed to import module: %s. ModuleNotFoundError: %s", info.name, error)


def load_package(package: str) -> bool:
    """Import a package by name; False (and a warning) where a module is missing."""
    try:
        importlib.import_module(package)
    except ModuleNotFoundError as error:
        get_logger().warning("failed to import package: %s. ModuleNotFoundError: %s", package,
                             error)
        return False
    return True

"""What a captured spec says about the run, said before anything runs (``--match-capture``).

A captured spec's ``__capture__`` section (``spec.reserved``) says which device and how many
intra-op threads the captured workload ran with. A run that differs is warned about before
anything runs (a replay at 1 thread set against a step at 16 reads as a slow tool); with
``--match-capture`` the run takes the recorded settings (the device only where its kind differs:
``cuda:3`` under torchrun stays ``cuda:3``). The host allocator's settings (``process.allocator``)
are compared too, and only warned about: a process takes them from its environment at start.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from param_compute.runtime.options import RunOptions
from param_compute.spec.reserved import allocator_difference, differences

log = logging.getLogger("param_compute")


def follow_capture(spec, options: RunOptions, follow: bool) -> RunOptions:
    """Warn where the run's device or thread count differs from those a captured spec records
    (``spec.reserved``); with ``--match-capture``, take the recorded ones."""
    settings = spec.capture or {}
    _allocator(settings, follow)
    if follow and not settings:
        log.warning("--match-capture: %s records no capture settings (__capture__); running "
                    "with -d %s --num-threads %d", spec.source, options.device,
                    options.num_threads)
    differ = differences(settings, options.device, options.num_threads)
    if follow and settings and settings.get("num_threads") is None:
        log.warning("--match-capture: the capture did not record its thread count; running "
                    "with --num-threads %d", options.num_threads)
    if not differ:
        return options
    if not follow:
        log.warning("this run differs from the captured workload: %s; its times may not "
                    "compare (--match-capture follows the capture)", "; ".join(differ))
        return options
    changes = {}
    if settings.get("num_threads") is not None:
        changes["num_threads"] = settings["num_threads"]
    if settings.get("device", options.device).split(":")[0] != options.device.split(":")[0]:
        changes["device"] = settings["device"]
    options = replace(options, **changes).check()
    if not options.dry_run and "device" in changes:
        from param_compute.measure.devices import check_device

        check_device(options.device)
    log.info("--match-capture: running with -d %s --num-threads %d, as captured",
             options.device, options.num_threads)
    return options


def _allocator(settings, follow: bool) -> None:
    """Warn where this process's allocator settings differ from the capture's: the pages a
    step touches first depend on them, and only a new process can take others."""
    from param_compute.process.allocator import allocator_settings, describe

    gap = allocator_difference(settings, allocator_settings())
    if gap is None:
        return
    captured = describe(settings["allocator"]) if settings["allocator"] else \
        "none of them set (glibc's defaults)"
    log.warning("this run differs from the captured workload: %s; which memory is recycled, "
                "and how many pages a step touches first, may not compare. %s", gap,
                ("--match-capture cannot change a running process's allocator: start it with "
                 f"{captured} in its environment") if follow else
                f"Start it with {captured} in its environment to run as captured")

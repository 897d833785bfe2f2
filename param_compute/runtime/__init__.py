"""Stage 3b, running: engine, executor, data, the timing loop, profiler ranges, devices, guards."""

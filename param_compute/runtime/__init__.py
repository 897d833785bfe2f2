"""Stage 3b, running: engine, executor, data, the timing loop, devices and guards."""

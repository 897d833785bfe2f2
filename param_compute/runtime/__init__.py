"""Stage 3b, running: the engine, the executor, generated data, the timing loop, devices and guards."""

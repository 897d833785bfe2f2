"""Running a plan: engine, executor, isolation, options, guards and the step replay."""

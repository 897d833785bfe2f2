"""Shared by the stages: signals held around each write, child processes tied to the run,
page faults counted."""

"""Stage 4, results: records, statistics, the one results-file owner, sinks and tools."""

"""Results: typed records, statistics, the one results-file owner and the live sinks."""

"""Stage 4, results: typed records, statistics, the one results-file reader/writer, sinks and analysis tools."""

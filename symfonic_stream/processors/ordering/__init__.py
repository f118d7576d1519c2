"""The per-run ordering guard (contract §5): dense seq, duplicates, holes, gaps, run ends."""

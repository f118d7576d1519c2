"""The per-run ordering guard (SPEC §5): dense seq, duplicates, holes, gaps, run ends."""

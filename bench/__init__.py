"""Benchmarks: commands that print figures and ratios against a baseline of the same run."""

"""``python -m bench.relative_load``: latency at the same relative load
(:func:`bench.projectors.relative_load`)."""

from bench.projectors import relative_load

if __name__ == "__main__":
    raise SystemExit(relative_load())

"""``python -m bench.profile``: one consumer profiled while it consumes
(:func:`bench.engine_cost.profile`)."""

from bench.engine_cost import profile

if __name__ == "__main__":
    raise SystemExit(profile())

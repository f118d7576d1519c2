"""``python -m bench.zero_cost``: the typed projector if its pure path cost nothing
(:func:`bench.engine_cost.zero_cost`)."""

from bench.engine_cost import zero_cost

if __name__ == "__main__":
    raise SystemExit(zero_cost())

"""``python -m bench.instructions``: instructions per event of the pure path
(:func:`bench.hot_path.instructions`)."""

from bench.hot_path import instructions

if __name__ == "__main__":
    raise SystemExit(instructions())

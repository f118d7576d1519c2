"""``python -m bench.offline``: the offline hot path against plain orjson
(:func:`bench.hot_path.offline`)."""

from bench.hot_path import offline

if __name__ == "__main__":
    raise SystemExit(offline())

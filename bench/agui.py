"""``python -m bench.agui``: AG-UI events built from dicts or from the protocol's models
(:func:`bench.hot_path.agui`)."""

from bench.hot_path import agui

if __name__ == "__main__":
    raise SystemExit(agui())

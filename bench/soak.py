"""``python -m bench.soak``: a million open runs that never end, one partition
(:func:`bench.state.soak`)."""

from bench.state import soak

if __name__ == "__main__":
    raise SystemExit(soak())

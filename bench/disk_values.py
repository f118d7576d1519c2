"""``python -m bench.disk_values``: one partition's runs with their values on disk or in memory
(:func:`bench.state.disk_values`)."""

from bench.state import disk_values

if __name__ == "__main__":
    raise SystemExit(disk_values())

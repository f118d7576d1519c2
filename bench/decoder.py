"""``python -m bench.decoder``: the decoder's cost against a record's keys
(:func:`bench.hot_path.decoder`)."""

from bench.hot_path import decoder

if __name__ == "__main__":
    raise SystemExit(decoder())

"""CLI command families, registered by :mod:`symfonic_stream.cli`."""

"""Processors: the pure per-partition logic each consumer plugs into the engine.

* :mod:`~symfonic_stream.processors.projector` — the typed and chunk projectors.
* :mod:`~symfonic_stream.processors.copier` — the copier: the benchmark baseline and
  the engine's own test processor.

Nothing is imported here, so importing one processor never pulls in the others.
"""

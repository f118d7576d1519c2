"""The repository's scripts; :mod:`scripts.kafka` is the development broker (a package so that
it imports as ``scripts.kafka`` from the repository's root, as its tests import it)."""

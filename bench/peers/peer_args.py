"""The command line every peer takes: where to read, where to write, which group.

Plain ``argparse`` and nothing of the project, so the peers that run in their own
environment (:mod:`bench.peers.environment`) load it by path, as they do :mod:`projection`.
"""

from __future__ import annotations

import argparse


def peer_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """A parser with the four options every peer requires (a peer adds its own)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    return parser

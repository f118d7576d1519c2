"""The Quix Streams peer's own virtual environment, made on first use.

Quix Streams 3.28 requires ``pydantic<2.14`` and ``pydantic-settings<2.16``, older than
what this project's environment holds, so it cannot share it. The benchmark creates
``build/bench-peers`` with the version it measures (:data:`QUIX_VERSION`) the first time
it needs it (about a minute, from the package index pip is configured with) and reuses it
after. Nothing of this is a dependency of the project.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

QUIX_VERSION = "3.28.1"
ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / "build" / "bench-peers"


def quix_python() -> Path:
    """The peer environment's interpreter, with Quix Streams installed."""
    python = VENV / "bin" / "python"
    if python.exists() and _has_quix(python):
        return python
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"quixstreams=={QUIX_VERSION}"], check=True
    )
    if not _has_quix(python):
        raise RuntimeError(f"quixstreams {QUIX_VERSION} did not install into {VENV}")
    return python


def _has_quix(python: Path) -> bool:
    probe = subprocess.run(
        [str(python), "-c", "import quixstreams; print(quixstreams.__version__)"],
        capture_output=True, text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip() == QUIX_VERSION

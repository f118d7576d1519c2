"""``python3 scripts/kafka COMMAND``: what ``scripts/kafka.sh`` runs (see ``__init__``)."""

import sys
from pathlib import Path

if sys.version_info < (3, 11):  # noqa: UP036  (this line must run on an older Python too)
    sys.exit(f"kafka.sh: error: Python 3.11 or newer is required, and {sys.executable} is "
             f"{sys.version.split()[0]} (set SYMFONIC_KAFKA_PYTHON to a python3.11+)")

# Run as a directory, this package's own folder is sys.path[0]: the repository's root instead,
# so the modules import each other as scripts.kafka.* (as the tests import them).
sys.path[0] = str(Path(__file__).resolve().parents[2])

from scripts.kafka.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))

"""``python -m symfonic_stream`` is the ``symfonic-stream`` command."""

from symfonic_stream.cli import main

main()

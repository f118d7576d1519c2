"""symfonic-stream: exactly-once Kafka consumers for LLM-agent runs."""

from importlib import metadata


def installed_version(distribution: str) -> str:
    """``distribution``'s version as installed, or ``"unknown"`` (read from the installed
    metadata, so nothing is imported to learn it)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


#: The project's version: pyproject.toml's, the one place it is written, as installed.
__version__ = installed_version("symfonic-stream")

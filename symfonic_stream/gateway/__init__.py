"""The SSE gateway: browsers and other HTTP clients read a run live, resuming at any seq."""

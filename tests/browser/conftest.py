"""The browser tests run against the real broker, like tests/integration: they use its
session fixtures (the broker check, which fails and never skips, and the end-of-session
sweep of the topics a test left behind)."""

from tests.integration.conftest import bootstrap_servers, sweep_test_topics  # noqa: F401

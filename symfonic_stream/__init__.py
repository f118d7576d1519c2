"""symfonic-stream: exactly-once Kafka consumers for LLM-agent runs."""

__version__ = "0.1.0"

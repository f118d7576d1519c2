"""The application: every consumer's topology, the consumer registry, the topic list."""

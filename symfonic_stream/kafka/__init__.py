"""Kafka access: client keyword arguments from the settings, and the admin side (topics)."""

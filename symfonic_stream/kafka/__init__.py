"""Kafka access: client keyword arguments from the settings, and the admin side (topics).

Importing this package makes every Metadata request aiokafka sends ask the broker never to
create a topic (see :mod:`symfonic_stream.kafka.no_auto_create`).
"""

from symfonic_stream.kafka.no_auto_create import forbid_topic_auto_creation

forbid_topic_auto_creation()

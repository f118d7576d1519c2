"""Kafka access: client keyword arguments from the settings, and the admin side (topics).

Importing this package corrects two things aiokafka does for every client the project
builds: every Metadata request asks the broker never to create a topic
(:mod:`symfonic_stream.kafka.no_auto_create`), and a group consumer sends one JoinGroup per
join however many assignors it lists (:mod:`symfonic_stream.kafka.join_group`).
"""

from symfonic_stream.kafka.join_group import join_once
from symfonic_stream.kafka.no_auto_create import forbid_topic_auto_creation

forbid_topic_auto_creation()
join_once()

"""The peers the typed projector is compared with (``python -m bench compare``): separate
programs doing the typed projection of :mod:`.projection` on the same input, exactly once,
each in its own consumer group (a naive aiokafka loop, the same on librdkafka, a Quix Streams
application; the last two in Quix Streams' own environment)."""

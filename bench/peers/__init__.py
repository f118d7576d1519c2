"""The peers the typed projector is compared with (``python -m bench.compare``).

Each peer is a separate program doing the typed projection of :mod:`.projection` on the
same input, exactly once, in its own consumer group: a naive aiokafka loop (:mod:`.naive`)
and a Quix Streams application (:mod:`.quix_app`, run in its own virtual environment,
:mod:`.environment`, because Quix Streams pins older pydantic releases than this project).
"""

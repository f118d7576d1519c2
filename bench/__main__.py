"""``python -m bench``: the Kafka benchmark (see :mod:`bench.kafka_bench`)."""

from __future__ import annotations

import sys

from bench.kafka_bench import main

sys.exit(main())

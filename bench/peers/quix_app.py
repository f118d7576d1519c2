"""The Quix Streams peer: the same typed projection as a Quix Streams application.

    <peer venv>/bin/python bench/peers/quix_app.py --bootstrap HOST:PORT --input TOPIC \
        --output TOPIC --group GROUP --commit-interval SECONDS

Exactly-once (``processing_guarantee="exactly-once"``), the input read as bytes, each
event expanded into its envelopes by :mod:`projection` (loaded by path: this runs in the
peer environment, ``bench.processes.quix_python``, where the project is not installed),
written with the input's key (the run id). ``commit_interval`` is Quix Streams' own
checkpoint interval: its default is 5 s; the latency-tuned row uses 0.1 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from projection import Projection, peer_parser
from quixstreams import Application


def main() -> int:
    parser = peer_parser()
    parser.add_argument("--commit-interval", type=float, default=5.0)
    args = parser.parse_args()
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        auto_offset_reset="earliest",
        loglevel="WARNING",
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    projection = Projection()
    sdf = app.dataframe(source)
    sdf = sdf.apply(lambda value: [v for _, v in projection(value)], expand=True)
    sdf.to_topic(sink)
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The peers that run in Quix Streams' environment (``bench.processes.quix_python``, where
the project is not installed: :mod:`projection` is loaded by path).

    <peer venv>/bin/python bench/peers/peer_env.py quix|rdkafka --bootstrap HOST:PORT \
        --input TOPIC --output TOPIC --group GROUP [--commit-interval SECONDS] [--copy]

* ``quix``: the typed projection as a Quix Streams application, exactly once
  (``processing_guarantee="exactly-once"``), the input read as bytes, each event expanded
  into its envelopes, written with the input's key (the run id). ``--commit-interval`` is
  Quix Streams' own checkpoint interval: 5 s by default; the latency-tuned row uses 0.1 s.
* ``rdkafka``: :mod:`naive`'s loop on confluent-kafka, to price the client: consume up to
  10,000 records, then one transaction for all of them on the process's one transactional
  producer (every output ``produce``d, the offsets with ``send_offsets_to_transaction`` and
  the consumer's group metadata: KIP-447). Beside ``naive-copier`` and ``naive-typed`` it
  shows what the same work costs on librdkafka (C, its own threads) instead of aiokafka
  (Python, the event loop's thread): the client's share, which no change inside the engine
  can remove. ``--copy`` writes the input values unchanged.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from projection import Projection, copy_value, peer_parser

BATCH = 10_000


def quix(args: argparse.Namespace) -> None:
    from quixstreams import Application

    app = Application(broker_address=args.bootstrap, consumer_group=args.group,
                      processing_guarantee="exactly-once", commit_interval=args.commit_interval,
                      auto_offset_reset="earliest", loglevel="WARNING")
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    projection = Projection()
    sdf = app.dataframe(source)
    sdf = sdf.apply(lambda value: [v for _, v in projection(value)], expand=True)
    sdf.to_topic(sink)
    app.run()


def rdkafka(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    project = copy_value if args.copy else Projection()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": args.bootstrap,
                         "transactional.id": f"{args.group}-0", "linger.ms": 5})
    producer.init_transactions()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer.subscribe([args.input])

    def produce(value: bytes, key: bytes | None) -> None:
        while True:
            try:
                producer.produce(args.output, value, key)
                return
            except BufferError:  # librdkafka's queue is full: let it deliver, then retry
                producer.poll(0.05)

    def transact(batch: list[Any]) -> None:
        producer.begin_transaction()
        offsets: dict[tuple[str, int], int] = {}
        for message in batch:
            for _, value in project(message.value()):
                produce(value, message.key())
            offsets[(message.topic(), message.partition())] = message.offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            consumer.consumer_group_metadata())
        producer.commit_transaction()

    try:
        while not stopping:
            batch = consumer.consume(BATCH, 0.25)
            for message in batch:  # (no end-of-partition events: enable.partition.eof is off)
                if message.error() is not None:
                    raise RuntimeError(f"consume failed: {message.error()}")
            if batch:
                transact(batch)
    finally:
        consumer.close()


if __name__ == "__main__":
    program = sys.argv.pop(1)
    parser = peer_parser()
    parser.add_argument("--commit-interval", type=float, default=5.0)
    parser.add_argument("--copy", action="store_true", help="copy values unchanged")
    {"quix": quix, "rdkafka": rdkafka}[program](parser.parse_args())

"""The naive librdkafka peer: :mod:`naive`'s loop on confluent-kafka, to price the client.

    <peer venv>/bin/python bench/peers/rdkafka_peer.py --bootstrap HOST:PORT --input TOPIC \
        --output TOPIC --group GROUP [--copy]

Consume up to 10,000 records, then one transaction for all of them on the process's one
transactional producer: every output ``produce``d, the offsets with
``send_offsets_to_transaction`` (the consumer's group metadata: KIP-447), then commit.
``--copy`` writes the input values unchanged; otherwise the peers' typed projection
(:mod:`projection`, loaded by path: this runs in the peer environment,
``bench.processes.quix_python``, where Quix Streams brought confluent-kafka). Set beside
``naive-copier`` and ``naive-typed`` it shows what the same work costs on librdkafka
(C, its own threads) instead of aiokafka (Python, the event loop's thread): the client's
share of the CPU per event, which no change inside the engine can remove.
A yardstick, not a consumer to deploy: no validation, no state, no dead letters.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer, TopicPartition
from projection import Projection, copy_value, peer_parser

BATCH = 10_000


def _produce(producer: Producer, topic: str, value: bytes, key: bytes | None) -> None:
    while True:
        try:
            producer.produce(topic, value, key)
            return
        except BufferError:  # librdkafka's queue is full: let it deliver, then retry
            producer.poll(0.05)


def _transact(producer: Producer, consumer: Consumer, args: argparse.Namespace,
              project: Callable[[bytes], list[tuple[bytes, bytes]]], batch: list[Any]) -> None:
    producer.begin_transaction()
    offsets: dict[tuple[str, int], int] = {}
    for message in batch:
        for _, value in project(message.value()):
            _produce(producer, args.output, value, message.key())
        offsets[(message.topic(), message.partition())] = message.offset() + 1
    producer.send_offsets_to_transaction(
        [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
        consumer.consumer_group_metadata())
    producer.commit_transaction()


def main() -> int:
    parser = peer_parser()
    parser.add_argument("--copy", action="store_true", help="copy values unchanged")
    args = parser.parse_args()
    project = copy_value if args.copy else Projection()
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    producer = Producer({"bootstrap.servers": args.bootstrap,
                         "transactional.id": f"{args.group}-0", "linger.ms": 5})
    producer.init_transactions()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer.subscribe([args.input])
    try:
        while not stopping:
            batch = consumer.consume(BATCH, 0.25)
            for message in batch:  # (no end-of-partition events: enable.partition.eof is off)
                if message.error() is not None:
                    raise RuntimeError(f"consume failed: {message.error()}")
            if batch:
                _transact(producer, consumer, args, project, batch)
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

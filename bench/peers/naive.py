"""The naive aiokafka peer: the loop a team writes first, exactly once.

    python -m bench.peers.naive --bootstrap HOST:PORT --input TOPIC --output TOPIC \
        --group GROUP [--copy]

Fetch, then per fetched partition one transaction on that partition's own transactional
producer (the partitions' transactions run concurrently): every output sent with
``send``, the offset with ``send_offsets_to_transaction``, then commit. ``--copy`` sends the
input values unchanged (the naive copier); otherwise the peers' typed projection
(:mod:`.projection`). No validation, no ordering guard, no state, no dead letters, no
rebalance handling beyond aiokafka's own: a yardstick, not a consumer to deploy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.peers.projection import Projection, copy_value, peer_parser

Project = Callable[[bytes], list[tuple[bytes, bytes]]]


class NaivePeer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.project: Project = copy_value if args.copy else Projection()
        self.producers: dict[int, AIOKafkaProducer] = {}
        self.stopping = asyncio.Event()

    async def producer(self, partition: int) -> AIOKafkaProducer:
        producer = self.producers.get(partition)
        if producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.args.bootstrap, enable_idempotence=True, acks="all",
                transactional_id=f"{self.args.group}-{partition}",
            )
            await producer.start()
            self.producers[partition] = producer
        return producer

    async def send_outputs(self, producer: AIOKafkaProducer, records: list[Any]) -> None:
        output, project, copy = self.args.output, self.project, self.args.copy
        for record in records:
            for key, value in project(record.value):
                await producer.send(output, value, key=record.key if copy else key)

    async def transact(self, tp: TopicPartition, records: list[Any]) -> None:
        producer = await self.producer(tp.partition)
        async with producer.transaction():
            await self.send_outputs(producer, records)
            await producer.send_offsets_to_transaction(
                {tp: records[-1].offset + 1}, self.args.group
            )

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(
            self.args.input, bootstrap_servers=self.args.bootstrap, group_id=self.args.group,
            isolation_level="read_committed", enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while not self.stopping.is_set():
                batch = await consumer.getmany(timeout_ms=250)
                await asyncio.gather(*(self.transact(tp, rs) for tp, rs in batch.items()))
        finally:
            for producer in self.producers.values():
                with contextlib.suppress(Exception):
                    await producer.stop()
            await consumer.stop()


async def _main(args: argparse.Namespace) -> None:
    peer = NaivePeer(args)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, peer.stopping.set)
    await peer.run()


def main(argv: list[str] | None = None) -> int:
    parser = peer_parser("python -m bench.peers.naive")
    parser.add_argument("--copy", action="store_true", help="copy values unchanged")
    asyncio.run(_main(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Back-to-back transactions of one partition producer: what aiokafka's retry delays cost.

    python -m bench.txn_probe [--transactions 400] [--records 250] [--rounds 3]

Right after a commit the broker is still finishing it for a few milliseconds, and refuses
two requests of the next transaction meanwhile: the transaction coordinator answers
AddPartitionsToTxn with CONCURRENT_TRANSACTIONS until the markers are written
(KAFKA-5477), and the group coordinator answers TxnOffsetCommit with
COORDINATOR_NOT_AVAILABLE until it has applied the offsets marker. aiokafka retries the
first after a fixed 20 ms and the second after ``retry_backoff_ms`` (100 ms); the engine
sets 2 ms and 20 ms (``ADD_PARTITIONS_RETRY_S`` in ``symfonic_stream.kafka.producer``,
``TRANSACTIONAL_RETRY_BACKOFF_MS`` in ``symfonic_stream.kafka.clients``). This runs the
same transactions (``--records`` records of 343 bytes to one output partition, plus the
input offset, as the engine commits them) with aiokafka's delays and with the engine's,
alternating per round, and prints each one's transaction time and refusals.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition
from aiokafka.producer import sender as aiokafka_sender

from bench.kafka_io import cleanup, create_topics, prefix_settings
from symfonic_stream.app.topologies import copier_topology
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.engine.commit import transact
from symfonic_stream.engine.records import Collector, OutputRecord
from symfonic_stream.kafka import producer as producer_module
from symfonic_stream.kafka.clients import TRANSACTIONAL_RETRY_BACKOFF_MS
from symfonic_stream.kafka.producer import ProcessProducer

#: (AddPartitionsToTxn retry delay, other retries' delay) in seconds, per configuration.
DELAYS = {
    "aiokafka": (0.02, 0.1),
    "engine": (producer_module.ADD_PARTITIONS_RETRY_S, TRANSACTIONAL_RETRY_BACKOFF_MS / 1000),
}
VALUE = b"x" * 343


class _RefusalCounter:
    """Counts the answers of one request type that make aiokafka retry."""

    def __init__(self, handler_name: str) -> None:
        self.count = 0
        self._handler: Any = getattr(aiokafka_sender, handler_name)
        self._original: Callable[..., Any] = self._handler.handle_response
        counter = self

        def handle_response(self: Any, response: Any) -> Any:
            backoff = counter._original(self, response)
            if backoff is not None:
                counter.count += 1
            return backoff

        self._handler.handle_response = handle_response

    def close(self) -> None:
        self._handler.handle_response = self._original


async def _run_transactions(
    settings: Settings, delays: tuple[float, float], transactions_n: int, records: int
) -> tuple[list[float], int, int]:
    topology = copier_topology(settings)
    producer = ProcessProducer(settings, topology.transactional_id(0))  # the engine's delays
    aiokafka_sender.BACKOFF_OVERRIDE = delays[0]
    producer._producer._sender._retry_backoff = delays[1]  # what retry_backoff_ms sets
    add_partitions = _RefusalCounter("AddPartitionsToTxnHandler")
    offset_commits = _RefusalCounter("TxnOffsetCommitHandler")
    source = TopicPartition(topology.source_topic, 0)
    output = topology.output_topics[0]
    await producer.start()
    seconds: list[float] = []
    try:
        for n in range(transactions_n):
            out = Collector()
            for _ in range(records):
                out.emit(OutputRecord(output, b"run-1", VALUE, "copy"))
            started = time.perf_counter()
            await transact(producer, topology, [(0, out)], {source: n + 1})
            seconds.append(time.perf_counter() - started)
    finally:
        add_partitions.close()
        offset_commits.close()
        await producer.close()
    return seconds, add_partitions.count, offset_commits.count


async def run(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    base = load_settings()
    run_id = f"bench-txn-{uuid.uuid4().hex[:8]}"
    prefixes: list[str] = []
    found: dict[str, dict[str, list[float]]] = {name: {} for name in DELAYS}
    try:
        for round_no in range(args.rounds):
            for name, delays in DELAYS.items():
                prefix = f"{run_id}-r{round_no}-{name}"
                prefixes.append(prefix)
                settings = prefix_settings(base, prefix, 1)
                await create_topics(settings)
                seconds, add_refused, commit_refused = await _run_transactions(
                    settings, delays, args.transactions, args.records
                )
                seconds = seconds[args.transactions // 10:]  # first ones: connections warm up
                ordered = sorted(seconds)
                figures = {
                    "median_ms": statistics.median(seconds) * 1000,
                    "mean_ms": statistics.fmean(seconds) * 1000,
                    "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
                    "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
                    "add_partitions_refusals": add_refused / args.transactions,
                    "offset_commit_refusals": commit_refused / args.transactions,
                }
                for key, value in figures.items():
                    found[name].setdefault(key, []).append(value)
                print(f"round {round_no + 1}: {name:<15} " + "  ".join(
                    f"{key} {value:.2f}" for key, value in figures.items()), flush=True)
    finally:
        aiokafka_sender.BACKOFF_OVERRIDE = producer_module.ADD_PARTITIONS_RETRY_S
        await cleanup(base, prefixes)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--transactions", type=int, default=400)
    parser.add_argument("--records", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found = asyncio.run(run(args))
    baseline = statistics.median(found["aiokafka"]["mean_ms"])
    print(f"\nmedians of {args.rounds} round(s), {args.transactions} transactions of "
          f"{args.records} records each; retry delays in ms, refusals per transaction")
    print(f"{'delays':<9} {'add retry':>9} {'retry':>6} {'median ms':>9} {'mean ms':>8} "
          f"{'p90 ms':>7} {'p99 ms':>7} {'add refused':>11} {'commit refused':>14} "
          f"{'mean x aiokafka':>15}")
    for name, values in found.items():
        med = {key: statistics.median(series) for key, series in values.items()}
        add_s, other_s = DELAYS[name]
        print(f"{name:<9} {add_s * 1000:>9g} {other_s * 1000:>6g} {med['median_ms']:>9.2f} "
              f"{med['mean_ms']:>8.2f} {med['p90_ms']:>7.2f} {med['p99_ms']:>7.2f} "
              f"{med['add_partitions_refusals']:>11.2f} {med['offset_commit_refusals']:>14.3f} "
              f"{med['mean_ms'] / baseline:>15.2f}")

if __name__ == "__main__":
    main()

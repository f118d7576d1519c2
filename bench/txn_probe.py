"""Back-to-back transactions of one partition producer: what a retry delay costs.

    python -m bench.txn_probe [--transactions 400] [--records 250] [--rounds 3]

After a commit the broker still writes the transaction's markers for a few milliseconds,
and refuses the next transaction's AddPartitionsToTxn with CONCURRENT_TRANSACTIONS until
they are written (KAFKA-5477). aiokafka retries after a fixed 20 ms; the engine sets
2 ms (``symfonic_stream.engine.transactions.ADD_PARTITIONS_RETRY_S``). This runs the
same transactions (``--records`` records of 343 bytes to one output partition, plus the
input offset, as the engine commits them) with each delay, alternating per round, and
prints each one's transaction time and how often the broker refused a first attempt.
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
from symfonic_stream.config import Settings, load_settings
from symfonic_stream.engine import transactions
from symfonic_stream.engine.records import Collector, OutputRecord
from symfonic_stream.engine.transactions import PartitionProducer
from symfonic_stream.processors.passthrough import copier_topology

#: The two retry delays compared: aiokafka's own, and the engine's.
DELAYS = {"aiokafka 20 ms": 0.02, "engine 2 ms": transactions.ADD_PARTITIONS_RETRY_S}
VALUE = b"x" * 343


class _RefusalCounter:
    """Counts AddPartitionsToTxn answers that make aiokafka retry."""

    def __init__(self) -> None:
        self.count = 0
        handler: Any = aiokafka_sender.AddPartitionsToTxnHandler
        self._original: Callable[..., Any] = handler.handle_response
        counter = self

        def handle_response(self: Any, response: Any) -> Any:
            backoff = counter._original(self, response)
            if backoff is not None:
                counter.count += 1
            return backoff

        handler.handle_response = handle_response

    def close(self) -> None:
        aiokafka_sender.AddPartitionsToTxnHandler.handle_response = self._original


async def _run_transactions(
    settings: Settings, delay: float, transactions_n: int, records: int
) -> tuple[list[float], int]:
    topology = copier_topology(settings)
    producer = PartitionProducer(settings, topology, 0)  # sets the engine's delay
    aiokafka_sender.BACKOFF_OVERRIDE = delay
    refusals = _RefusalCounter()
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
            await producer.commit(out, {source: n + 1})
            seconds.append(time.perf_counter() - started)
    finally:
        refusals.close()
        await producer.close()
    return seconds, refusals.count


async def run(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    base = load_settings()
    run_id = f"bench-txn-{uuid.uuid4().hex[:8]}"
    prefixes: list[str] = []
    found: dict[str, dict[str, list[float]]] = {name: {} for name in DELAYS}
    try:
        for round_no in range(args.rounds):
            for name, delay in DELAYS.items():
                prefix = f"{run_id}-r{round_no}-{int(delay * 1000)}ms"
                prefixes.append(prefix)
                settings = prefix_settings(base, prefix, 1)
                await create_topics(settings)
                seconds, refusals = await _run_transactions(
                    settings, delay, args.transactions, args.records
                )
                seconds = seconds[args.transactions // 10:]  # first ones: connections warm up
                ordered = sorted(seconds)
                figures = {
                    "median_ms": statistics.median(seconds) * 1000,
                    "mean_ms": statistics.fmean(seconds) * 1000,
                    "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
                    "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
                    "refusals_per_txn": refusals / args.transactions,
                }
                for key, value in figures.items():
                    found[name].setdefault(key, []).append(value)
                print(f"round {round_no + 1}: {name:<15} " + "  ".join(
                    f"{key} {value:.2f}" for key, value in figures.items()), flush=True)
    finally:
        aiokafka_sender.BACKOFF_OVERRIDE = transactions.ADD_PARTITIONS_RETRY_S
        await cleanup(base, prefixes)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--transactions", type=int, default=400)
    parser.add_argument("--records", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found = asyncio.run(run(args))
    baseline = statistics.median(found["aiokafka 20 ms"]["mean_ms"])
    print(f"\nmedians of {args.rounds} round(s), {args.transactions} transactions of "
          f"{args.records} records each:")
    print(f"{'retry delay':<16} {'median ms':>9} {'mean ms':>8} {'p90 ms':>7} {'p99 ms':>7} "
          f"{'refused/txn':>11} {'mean x aiokafka':>15}")
    for name, values in found.items():
        med = {key: statistics.median(series) for key, series in values.items()}
        print(f"{name:<16} {med['median_ms']:>9.2f} {med['mean_ms']:>8.2f} {med['p90_ms']:>7.2f} "
              f"{med['p99_ms']:>7.2f} {med['refusals_per_txn']:>11.2f} "
              f"{med['mean_ms'] / baseline:>15.2f}")


if __name__ == "__main__":
    main()

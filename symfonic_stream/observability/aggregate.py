"""What the supervisor of ``run --workers N`` serves: its workers' answers, combined.

Each worker is a whole consumer process with its own ``/metrics``, ``/healthz`` and
``/readyz`` on a private port (``symfonic_stream.runtime.workers``). The supervisor asks
them with :func:`http_get` and answers for all of them:

* ``/metrics``: every worker's families, parsed (:func:`parse_expositions`) and merged
  into one valid text (:func:`merge_expositions`), each sample with a ``worker="<i>"``
  label, HELP and TYPE once per family; a worker that does not answer, or answers with
  something that does not parse, is left out (and not counted as up);
* ``/healthz`` and ``/readyz``: 200 only when every worker is running and answers 200
  (:func:`combine`), else the reasons, each naming its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

WORKER_LABEL: Final = "worker"
#: Most bytes read of one answer (a worker's /metrics is some tens of KiB).
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
#: Longest reason a probe answers (as HealthState bounds its own).
MAX_REASON_CHARS: Final = 500


# --------------------------------------------------------------------------- metrics


def parse_expositions(texts: Mapping[str, str]) -> dict[str, list[Metric]]:
    """Each worker's families (worker label value → families); a text that does not parse
    is left out, as if the worker had not answered."""
    parsed: dict[str, list[Metric]] = {}
    for worker, text in texts.items():
        try:
            parsed[worker] = list(text_string_to_metric_families(text))
        except ValueError as exc:
            log.warning("a worker's metrics do not parse", extra={
                "worker": worker, "error": str(exc)[:200]})
    return parsed


def merge_families(
    parsed: Mapping[str, Sequence[Metric]], own: Iterable[Metric] = ()
) -> list[Metric]:
    """One family per name, holding every worker's samples with a ``worker`` label (one a
    worker already had is replaced); ``own`` families (the supervisor's) come first, as
    they are. A family whose type differs from the first worker's is dropped (it would
    make the text invalid; workers of one build never differ)."""
    merged: dict[str, Metric] = {family.name: family for family in own}
    mine = set(merged)
    for worker, families in parsed.items():
        for family in families:
            if family.name in mine:
                continue
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit)
            elif target.type != family.type:
                log.warning("a worker's metric has another type", extra={
                    "worker": worker, "metric": family.name, "type": family.type})
                continue
            target.samples.extend(
                sample._replace(labels={**sample.labels, WORKER_LABEL: worker})
                for sample in family.samples
            )
    return list(merged.values())


class _Families:
    """A prometheus-client collector of fixed families (what ``generate_latest`` reads)."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def merge_expositions(
    parsed: Mapping[str, Sequence[Metric]], own: Iterable[Metric] = ()
) -> bytes:
    """The Prometheus text of :func:`merge_families`."""
    return generate_latest(_Families(merge_families(parsed, own)))


# --------------------------------------------------------------------------- probes


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """One worker's answer to a probe: ``exit_status`` is None while it runs; ``status``
    is the HTTP status, 0 when it did not answer (``body`` then says why)."""

    worker: int
    exit_status: int | None
    status: int
    body: str


def _why(answer: WorkerAnswer) -> str:
    if answer.exit_status is not None:
        return f"exited with status {answer.exit_status}"
    if answer.status == 0:
        return f"does not answer ({answer.body})"
    text = " ".join(answer.body.split()).removeprefix("not ready:").strip()
    return text or f"answered {answer.status}"


def combine(answers: Iterable[WorkerAnswer]) -> tuple[bool, str]:
    """200 when every worker runs and answered 200; else False and why, worker by worker."""
    reasons = [f"worker {a.worker}: {_why(a)}" for a in answers
               if a.exit_status is not None or a.status != 200]
    return not reasons, "; ".join(reasons)[:MAX_REASON_CHARS]


# --------------------------------------------------------------------------- the client


async def http_get(
    port: int, path: str, *, host: str = "127.0.0.1", timeout_s: float = 3.0
) -> tuple[int, bytes]:
    """GET ``path`` from a worker's server: (status, body), or (0, why) when it does not
    answer within ``timeout_s`` (the server closes every connection after one answer)."""
    try:
        return await asyncio.wait_for(_get(host, port, path), timeout_s)
    except TimeoutError:
        return 0, f"no answer within {timeout_s:g} s".encode()
    except (OSError, ValueError) as exc:
        return 0, f"{type(exc).__name__}: {exc}".encode()


async def _get(host: str, port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode("latin-1"))
        await writer.drain()
        raw = bytearray()
        while chunk := await reader.read(65536):
            raw += chunk
            if len(raw) > MAX_ANSWER_BYTES:
                raise ValueError(f"answer larger than {MAX_ANSWER_BYTES} bytes")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, sep, body = bytes(raw).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ")
    if not sep or len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) != len(body):
        raise ValueError(f"answer cut short: {len(body)} of {length} bytes")
    return int(status_line[1]), body

"""The chart's Grafana dashboard (``files/grafana-dashboard.json``), declared here as rows of
panels and written by ``make schemas`` (``symfonic_stream.tools.chart``).

Every selector is built by :func:`consumer` or :func:`gateway`, which put the release
variables on it (``namespace``, ``job``: the chart's monitor makes ``job`` the release name,
and ``instance``), and every aggregation by :func:`by`, which keeps ``namespace`` and
``job``: two releases scraped by one Prometheus are two series on every panel, and picking
one release (or namespace, or pod) filters every panel. ``consumer`` filters the series that
carry it; the gateway's carry none. docs/metrics.md ("Dashboard") lists the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

PREFIX: Final = "symfonic_stream_"
#: The variables a panel's series are filtered by, in the order the selector names them.
RELEASE_FILTERS: Final = 'namespace=~"$namespace", job=~"$job", instance=~"$instance"'
CONSUMER_FILTER: Final = 'consumer=~"$consumer"'
#: The labels every aggregation keeps, so that releases never add up.
RELEASE_LABELS: Final = ("namespace", "job")
LEGEND_PREFIX: Final = "{{namespace}}/{{job}} "
RATE: Final = "[$__rate_interval]"
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
#: The metric every release's consumers and gateway export: the release variables' values.
RELEASE_SERIES: Final = '{__name__=~"symfonic_stream_ready|symfonic_stream_gateway_viewers"}'


#: Matchers the panels name beside the variables'.
ROUTER: Final = 'consumer="pauses"'
VALIDATOR: Final = 'consumer="resumes"'
ABORTED: Final = 'outcome="aborted"'
REQUEST: Final = 'type="request"'
REVIEW: Final = 'type="review"'
TOO_SLOW: Final = 'ending="too_slow"'


def _selector(metric: str, matchers: tuple[str, ...]) -> str:
    return f"{PREFIX}{metric}{{{', '.join(matchers)}}}"


def consumer(metric: str, *matchers: str) -> str:
    """A selector of a consumer's family (labelled ``consumer``), filtered by every variable."""
    return _selector(metric, (RELEASE_FILTERS, CONSUMER_FILTER, *matchers))


def gateway(metric: str, *matchers: str) -> str:
    """A selector of the gateway's families (no ``consumer`` label)."""
    return _selector(metric, (RELEASE_FILTERS, *matchers))


def by(*labels: str) -> str:
    """An aggregation's grouping: the release labels, then ``labels``."""
    return f"by ({', '.join((*RELEASE_LABELS, *labels))})"


def rate(selector: str) -> str:
    return f"rate({selector}{RATE})"


def increase(selector: str) -> str:
    return f"increase({selector}{RATE})"


def quantile(q: float, buckets: str, *labels: str) -> str:
    return f"histogram_quantile({q}, sum {by(*labels, 'le')} ({rate(buckets)}))"


@dataclass(frozen=True)
class Target:
    expr: str
    #: The legend after the release (``{{namespace}}/{{job}}``), which every legend starts with.
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    width: int = 12
    kind: str = "timeseries"
    stacked: bool = False
    #: A stat's values shown as words: (value, word, colour), lowest value first.
    words: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


def _stat(title: str, description: str, *targets: Target,
          words: tuple[tuple[int, str, str], ...] = ()) -> Panel:
    return Panel(title, description, "short", targets, width=8, kind="stat", words=words)


def _p50_p99(buckets: str, label: str) -> tuple[Target, Target]:
    """A histogram's median and 99th percentile, per ``label``."""
    legend = "{{" + label + "}}"
    return (Target(quantile(0.5, buckets, label), f"p50 {legend}"),
            Target(quantile(0.99, buckets, label), f"p99 {legend}"))


def _mean(family: str, *labels: str) -> str:
    """The mean of a histogram over the interval: its sum's rate over its count's."""
    return (f"sum {by(*labels)} ({rate(consumer(family + '_sum'))}) / "
            f"sum {by(*labels)} ({rate(consumer(family + '_count'))})")


OVERVIEW = Row("Overview", (
    _stat("Ready", "1 when the consumer has its partitions, restored state and is consuming "
          "(symfonic_stream_ready), per release; the lowest of its instances. 0 for 5 minutes "
          "fires SymfonicStreamConsumerNotReady.",
          Target(f"min {by('consumer')} ({consumer('ready')})", "{{consumer}}"),
          words=((0, "NOT READY", "red"), (1, "READY", "green"))),
    _stat("Instances ready / running", "Instances reporting ready, and instances scraped at "
          "all, per release.",
          Target(f"sum {by()} ({consumer('ready')})", "ready"),
          Target(f"count {by()} ({consumer('ready')})", "running")),
    _stat("Total lag (records)", "Consumer lag against the last stable offset, every "
          "partition, per release.",
          Target(f"sum {by()} ({consumer('consumer_lag_records')})", "lag")),
))

THROUGHPUT = Row("Throughput and lag", (
    Panel("Records in /s", "Records consumed per second, by consumer and topic.", "ops", (
        Target(f"sum {by('consumer', 'topic')} ({rate(consumer('records_in_total'))})",
               "{{consumer}} {{topic}}"),)),
    Panel("Records out /s", "Records produced per second, by consumer and record type.",
          "ops", (Target(f"sum {by('consumer', 'type')} ({rate(consumer('records_out_total'))})",
                         "{{consumer}} {{type}}"),), stacked=True),
    Panel("Consumer lag per partition", "Records between the consumer position and the last "
          "stable offset, per input partition. A line that keeps rising means this consumer "
          "falls behind (SymfonicStreamConsumerLagGrowing).", "short", (
              Target(f"max {by('consumer', 'topic', 'partition')} "
                     f"({consumer('consumer_lag_records')})",
                     "{{consumer}} {{topic}}/{{partition}}"),)),
    Panel("End-to-end latency p50 / p99", "Kernel timestamp of the source event to the commit "
          "of its output.", "s",
          _p50_p99(consumer("end_to_end_latency_seconds_bucket"), "consumer")),
))

QUALITY = Row("Data quality", (
    Panel("Dead letters by reason", "Records sent to the dead-letter topic per interval. Any "
          "is an alert: read the symfonic-dlq-* headers on the dead-letter topic.", "short", (
              Target(f"sum {by('consumer', 'reason')} "
                     f"({increase(consumer('dead_letters_total'))})",
                     "{{consumer}} {{reason}}"),), width=8, stacked=True),
    Panel("Gaps and duplicates", "Gap records written (data lost upstream), duplicates "
          "dropped and events of an unknown kind, per interval.", "short", (
              Target(f"sum {by('consumer')} ({increase(consumer('gaps_total'))})",
                     "gaps {{consumer}}"),
              Target(f"sum {by('consumer')} ({increase(consumer('duplicates_total'))})",
                     "duplicates {{consumer}}"),
              Target(f"sum {by('consumer')} ({increase(consumer('unknown_kinds_total'))})",
                     "unknown kinds {{consumer}}")), width=8),
    Panel("Buffered events", "Events held behind holes by the ordering guard, waiting for a "
          "missing index (bounded by SYMFONIC_RUN_BUFFER_MAX per run and the gap timeout).",
          "short", (Target(f"sum {by('consumer')} ({consumer('buffered_events')})",
                           "{{consumer}}"),), width=8),
    Panel("Active runs", "Runs held in the state store (open or paused, plus closed ones "
          "within their grace period).", "short", (
              Target(f"sum {by('consumer')} ({consumer('active_runs')})", "{{consumer}}"),)),
    Panel("Transaction aborts and fencing", "Aborted transactions and fenced producers per "
          "interval. A few around a rebalance are expected; a steady rate is not "
          "(SymfonicStreamTransactionsAborting).", "short", (
              Target(f"sum {by('consumer')} "
                     f"({increase(consumer('transactions_total', ABORTED))})",
                     "aborted {{consumer}}"),
              Target(f"sum {by('consumer')} ({increase(consumer('producers_fenced_total'))})",
                     "fenced {{consumer}}"))),
))

STATE = Row("Transactions and state", (
    Panel("Rebalances", "Consumer-group rebalances per interval.", "short", (
        Target(f"sum {by('consumer')} ({increase(consumer('rebalances_total'))})",
               "{{consumer}}"),), width=8),
    Panel("Transaction duration p99", "Begin to commit or abort of one Kafka transaction: "
          "p99 and mean.", "s", (
              Target(quantile(0.99, consumer("transaction_duration_seconds_bucket"), "consumer"),
                     "p99 {{consumer}}"),
              Target(_mean("transaction_duration_seconds", "consumer"), "mean {{consumer}}")),
          width=8),
    Panel("State restore duration", "Time to restore one partition's ordering-guard state "
          "from its changelog after an assignment: mean and p99 over the interval.", "s", (
              Target(_mean("state_restore_duration_seconds", "consumer"), "mean {{consumer}}"),
              Target(quantile(0.99, consumer("state_restore_duration_seconds_bucket"),
                              "consumer"), "p99 {{consumer}}")), width=8),
))

#: The pause router is consumer ``pauses``; the resume validator (claims, answers,
#: escalations) is ``resumes``.
PAUSES = Row("Pause path", (
    Panel("Tickets routed by queue /s", "Tickets the pause router wrote to human-review "
          "queues, by queue and kind; queue 'expired': a ticket already past its expiry when "
          "routed.", "ops", (
              Target(f"sum {by('queue', 'kind')} "
                     f"({rate(consumer('tickets_routed_total', ROUTER))})",
                     "{{queue}} {{kind}}"),), width=8, stacked=True),
    Panel("Escalations by queue", "Tickets the resume validator moved to another queue "
          "because nobody answered them in time (the routing rules' escalations), per "
          "interval, by the queue they went to.", "short", (
              Target(f"sum {by('queue', 'kind')} "
                     f"({increase(consumer('tickets_routed_total', VALIDATOR))})",
                     "to {{queue}} {{kind}}"),), width=8, stacked=True),
    Panel("Review requests /s", "Claims, releases and answers reaching the resume validator "
          "(one count: a claim is not counted apart), and the review-state records it wrote "
          "for them (claimed, released, refused, lease run out, escalated, answered).",
          "ops", (
              Target(f"sum {by()} ({rate(consumer('records_in_total', VALIDATOR, REQUEST))})",
                     "requests"),
              Target(f"sum {by()} ({rate(consumer('records_out_total', VALIDATOR, REVIEW))})",
                     "review-state changes")), width=8),
    Panel("Open tickets by queue", "Tickets registered on each queue and not yet answered "
          "nor expired (a claimed one too), as the resume validator holds them; an escalated "
          "ticket counts on the queue it went to.", "short", (
              Target(f"sum {by('queue')} ({consumer('review_open_tickets', VALIDATOR)})",
                     "{{queue}}"),), width=8, stacked=True),
    Panel("Oldest open ticket by queue", "How long the oldest open ticket of each queue has "
          "waited since it was registered. Over an hour with no claim on the queue in that "
          "hour fires SymfonicStreamQueueUnclaimed.", "s", (
              Target(f"max {by('queue')} "
                     f"({consumer('review_oldest_open_ticket_seconds', VALIDATOR)})",
                     "{{queue}}"),), width=8),
    Panel("Next expiry by queue", "Time left before the next open ticket of each queue "
          "expires unanswered (its run then ends abandoned). Under 15 minutes for 5 fires "
          "SymfonicStreamTicketNearExpiry.", "s", (
              Target(f"min {by('queue')} "
                     f"({consumer('review_next_expiry_seconds', VALIDATOR)})",
                     "{{queue}}"),), width=8),
    Panel("Claims by queue and outcome", "Claims the resume validator decided per interval, "
          "by the ticket's queue: granted, renewed (by its holder), or refused: held "
          "(another reviewer holds it), answered, rested (its claimant's claim ran its total "
          "lifetime).", "short", (
              Target(f"sum {by('queue', 'outcome')} "
                     f"({increase(consumer('review_claims_total', VALIDATOR))})",
                     "{{queue}} {{outcome}}"),), stacked=True),
    Panel("Answers by outcome /s", "What the resume validator decided: accepted, or the "
          "reason a claim or answer was refused (expired: the answer came after its ticket "
          "expired, SymfonicStreamAnswersAfterExpiry).", "ops", (
              Target(f"sum {by('outcome')} ({rate(consumer('resumes_total'))})",
                     "{{outcome}}"),), stacked=True),
))

GATEWAY = Row("Gateway", (
    Panel("Viewers", "Streams open now (SSE and AG-UI), by stream.", "short", (
        Target(f"sum {by('stream')} ({gateway('gateway_viewers')})", "{{stream}}"),),
          width=8, stacked=True),
    Panel("Streams ended /s", "Streams ended, by how: run_ended (its end was sent), "
          "disconnected (the client went away), too_slow (dropped after "
          "SYMFONIC_GATEWAY_SEND_TIMEOUT_S), shutdown.", "ops", (
              Target(f"sum {by('stream', 'ending')} ({rate(gateway('gateway_streams_total'))})",
                     "{{stream}} {{ending}}"),), width=8, stacked=True),
    Panel("Slow-client disconnects", "Streams dropped because the client did not take its "
          "messages within SYMFONIC_GATEWAY_SEND_TIMEOUT_S, per interval.", "short", (
              Target(f"sum {by('stream')} "
                     f"({increase(gateway('gateway_streams_total', TOO_SLOW))})",
                     "{{stream}}"),), width=8),
    Panel("Refusals /s", "Requests refused before a stream, by reason, and connections the "
          "HTTP edge closed before any route. Refusals at a client or connection limit "
          "(too_many_clients, too_many_tenant_clients, too_many_connections) for 10 minutes "
          "fire SymfonicStreamGatewayClientsRefused.", "ops", (
              Target(f"sum {by('reason')} ({rate(gateway('gateway_refused_total'))})",
                     "{{reason}}"),
              Target(f"sum {by('reason')} ({rate(gateway('gateway_edge_refused_total'))})",
                     "edge {{reason}}")), stacked=True),
    Panel("First message p50 / p99", "A stream's request to its first message sent: what a "
          "viewer waits before it sees anything (its backlog read from memory or Kafka).",
          "s", _p50_p99(gateway("gateway_first_event_seconds_bucket"), "stream")),
    Panel("Delivery lag p50 / p99", "A live record's Kafka timestamp (set as the "
          "consumer's transaction produced it, just before its commit) to its send to a "
          "viewer: what a viewer that is caught up waits for each record. p99 over 5 s for "
          "10 minutes fires SymfonicStreamGatewayDeliveryLag.", "s",
          _p50_p99(gateway("gateway_delivery_lag_seconds_bucket"), "stream")),
    Panel("Resumes served", "Streams served from after a seq (Last-Event-ID or ?after_seq), "
          "per interval: clients reconnecting or resuming a run.", "short", (
              Target(f"sum {by('stream')} ({increase(gateway('gateway_resumes_total'))})",
                     "{{stream}}"),)),
    Panel("Messages sent and read-backs /s", "SSE messages sent (counted when a stream ends), "
          "and reads from Kafka of a run's records no longer held in memory: a viewer "
          "resuming (Last-Event-ID) or starting behind what the gateway holds.", "ops", (
              Target(f"sum {by('stream')} ({rate(gateway('gateway_messages_total'))})",
                     "messages {{stream}}"),
              Target(f"sum {by('stream')} ({rate(gateway('gateway_read_backs_total'))})",
                     "read-backs {{stream}}")), width=8),
    Panel("Records read by fate /s", "Records the gateway's tails read: filed, repeated (a seq "
          "already filed), foreign (another tenant's than its run's), skipped (not an "
          "envelope of its key's run).", "ops", (
              Target(f"sum {by('stream', 'outcome')} ({rate(gateway('gateway_records_total'))})",
                     "{{stream}} {{outcome}}"),), width=8, stacked=True),
    Panel("Held in memory", "Bytes of records the gateway holds, by stream (its memory bound).",
          "bytes", (
              Target(f"sum {by('stream')} ({gateway('gateway_held_bytes')})", "{{stream}}"),),
          width=8),
))

ROWS: Final = (OVERVIEW, THROUGHPUT, QUALITY, STATE, PAUSES, GATEWAY)

#: Series of a timeseries panel, drawn alike on every panel.
_LINES: Final = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
_LEGEND: Final = {
    "legend": {"displayMode": "table", "placement": "bottom",
               "calcs": ["mean", "max", "lastNotNull"]},
    "tooltip": {"mode": "multi", "sort": "desc"},
}


def _target(ref: str, target: Target, instant: bool) -> dict[str, Any]:
    return {"refId": ref, "datasource": DATASOURCE, "expr": target.expr,
            "legendFormat": LEGEND_PREFIX + target.legend,
            **({"instant": True} if instant else {"range": True})}


def _panel(panel: Panel, panel_id: int, grid: dict[str, int]) -> dict[str, Any]:
    stat = panel.kind == "stat"
    targets = [_target(chr(ord("A") + i), t, stat) for i, t in enumerate(panel.targets)]
    defaults: dict[str, Any] = {"unit": panel.unit}
    if stat:
        options: dict[str, Any] = {
            "colorMode": "value", "graphMode": "none", "textMode": "value_and_name",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
        if panel.words:
            defaults["mappings"] = [{"type": "value", "options": {
                str(value): {"text": word, "color": colour}
                for value, word, colour in panel.words}}]
            # Each colour from its value up (the lowest from anything below).
            defaults["thresholds"] = {"mode": "absolute", "steps": [
                {"color": colour, "value": None if i == 0 else value}
                for i, (value, _, colour) in enumerate(panel.words)]}
            options["colorMode"] = "background"
    else:
        stacking = {"mode": "normal" if panel.stacked else "none", "group": "A"}
        defaults["custom"] = {**_LINES, "stacking": stacking}
        options = _LEGEND
    return {"id": panel_id, "type": panel.kind, "title": panel.title,
            "description": panel.description, "datasource": DATASOURCE, "gridPos": grid,
            "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options}


def _panels() -> list[dict[str, Any]]:
    """Every row and its panels, laid out left to right in Grafana's 24 columns."""
    out: list[dict[str, Any]] = []
    y = 0
    for row in ROWS:
        out.append({"id": len(out) + 1, "type": "row", "title": row.title, "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        y, x, height = y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                y, x = y + height, 0
            height = 4 if panel.kind == "stat" else 8
            out.append(_panel(panel, len(out) + 1, {"h": height, "w": panel.width, "x": x,
                                                     "y": y}))
            x += panel.width
        y += height
    return out


def _variable(name: str, query: str, all_value: str) -> dict[str, Any]:
    """A multi-select query variable, refreshed when the time range changes."""
    return {
        "name": name, "label": name.title(), "type": "query", "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "includeAll": True, "allValue": all_value, "multi": True, "hide": 0, "options": [],
        "refresh": 2, "regex": "", "sort": 1, "skipUrlSync": False,
    }


def variables() -> list[dict[str, Any]]:
    """The data source, then the release (namespace, job), the pod, the consumer: each
    narrows the next one's values."""
    release = RELEASE_SERIES[:-1]
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0, "includeAll": False, "multi": False,
         "options": [], "refresh": 1, "regex": "", "skipUrlSync": False},
        # All namespaces matches a series without one too (a scrape outside Kubernetes).
        _variable("namespace", f"label_values({RELEASE_SERIES}, namespace)", ".*"),
        _variable("job", f'label_values({release}, namespace=~"$namespace"}}, job)', ".+"),
        _variable("instance", f'label_values({release}, namespace=~"$namespace", '
                  'job=~"$job"}, instance)', ".+"),
        # Every consumer's series has the label; the gateway's have none (never filtered).
        _variable("consumer", f'label_values({PREFIX}ready{{namespace=~"$namespace", '
                  'job=~"$job", instance=~"$instance"}, consumer)', ".*"),
    ]


def dashboard() -> dict[str, Any]:
    """The dashboard, as Grafana imports it."""
    return {
        "uid": "symfonic-stream",
        "title": "symfonic-stream",
        "description": "Consumers and gateway of symfonic-stream, per release: throughput, "
                       "lag, latency, data quality, transactions and state, the pause path and "
                       "the gateway. Metrics, variables and rows: docs/metrics.md.",
        "tags": ["symfonic-stream", "kafka"],
        "timezone": "browser",
        # Provisioned from the chart's ConfigMap: a change made in Grafana would be lost.
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": variables()},
        "panels": _panels(),
    }

"""What a worker shows over HTTP: readiness, Prometheus metrics, the latest rankings.

- ``GET /healthz``: 200 once the worker has recovered its state and model and holds its
  partitions, 503 before (a readiness probe).
- ``GET /metrics``: Prometheus text format (prometheus-client).
- ``GET /rankings/{job_id}``: the latest ranking this worker made for the job, as JSON.

>>> metrics = ServiceMetrics()
>>> metrics.events.labels("submitted").inc()
>>> b'leap_events_total{type="submitted"} 1.0' in metrics.exposition()
True
"""

from __future__ import annotations

import json
import sys
import threading
from collections import OrderedDict
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["RecentRankings", "ServiceMetrics", "serve_http"]


class ServiceMetrics:
    """The worker's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.events = Counter(
            "leap_events", "Input events processed, by type", ["type"], registry=registry
        )
        self.rankings = Counter("leap_rankings_published", "Rankings published", registry=registry)
        self.ranked = Counter(
            "leap_rankings_ranked", "Rankings that did not abstain", registry=registry
        )
        self.dead_letters = Counter(
            "leap_dead_letters",
            "Messages sent to the dead-letter topic",
            ["error_type"],
            registry=registry,
        )
        self.completions = Counter(
            "leap_completions",
            "Completions, by what became of them",
            ["outcome"],
            registry=registry,
        )
        self.lag = Gauge(
            "leap_consumer_lag",
            "Messages behind the end of each input partition",
            ["topic", "partition"],
            registry=registry,
        )
        self.assigned = Gauge(
            "leap_assigned_partitions", "Input partitions this worker holds", registry=registry
        )
        self.latency = Histogram(
            "leap_submit_to_ranking_seconds",
            "From a submission's Kafka timestamp to its ranking's commit",
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=registry,
        )
        self.model_version = Gauge(
            "leap_model_version", "Completions the ranking model has learned", registry=registry
        )
        self.scored = Counter(
            "leap_online_scored",
            "Completions scored against their submission-time prediction",
            registry=registry,
        )
        self.within_10pct = Counter(
            "leap_online_within_10pct",
            "Scored completions predicted within 10%",
            registry=registry,
        )
        self.accuracy = Gauge(
            "leap_online_within_10pct_ratio",
            "Share of scored completions within 10%",
            registry=registry,
        )
        self.coverage = Gauge(
            "leap_online_coverage_ratio",
            "Share of rankings that did not abstain",
            registry=registry,
        )

        self.serving = Gauge(
            "leap_serving_model",
            "1 for the model that ranks (online or a nightly model), 0 for the others",
            ["model"],
            registry=registry,
        )
        self.window_accuracy = Gauge(
            "leap_model_window_within_10pct_ratio",
            "Each model's share within 10% over the promotion rule's window, at its last decision",
            ["model"],
            registry=registry,
        )
        self.late_examples = Counter(
            "leap_champion_late_examples",
            "Learn examples of a day older than the promotion rule's window: not scored",
            registry=registry,
        )
        self.refused_models = Counter(
            "leap_nightly_models_refused",
            "Nightly models not loaded (other libraries, features, catalog or schema)",
            registry=registry,
        )
        self.refused_snapshots = Counter(
            "leap_online_snapshots_refused",
            "Online model snapshots not loaded (other libraries, features, catalog or schema)",
            registry=registry,
        )
        self.serving.labels("online").set(1)

        # the ratios' own tallies: prometheus counters are for exposition, not for reading back
        self._tally = {"scored": 0, "within": 0, "rankings": 0, "ranked": 0}

    def score(self, predicted: float | None, measured: float) -> None:
        """Count one completion against the prediction its submission got."""
        if predicted is None:
            return
        tally = self._tally
        tally["scored"] += 1
        self.scored.inc()
        if abs(predicted - measured) <= 0.1 * measured:
            tally["within"] += 1
            self.within_10pct.inc()
        self.accuracy.set(tally["within"] / tally["scored"])

    def serve(self, serving: str, shares: dict[str, float]) -> None:
        """Record a serving decision: who ranks, and every model's share over the window."""
        for model in {*shares, serving, "online"}:
            self.serving.labels(model).set(1 if model == serving else 0)
        for model, share in shares.items():
            self.window_accuracy.labels(model).set(share)

    def ranking(self, abstained: bool) -> None:
        """Count one published ranking."""
        tally = self._tally
        tally["rankings"] += 1
        self.rankings.inc()
        if not abstained:
            tally["ranked"] += 1
            self.ranked.inc()
        self.coverage.set(tally["ranked"] / tally["rankings"])

    def exposition(self) -> bytes:
        """The metrics in Prometheus text format."""
        return generate_latest(self.registry)


class RecentRankings:
    """The latest ranking record per job id, the newest ``capacity`` jobs (thread-safe)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._records: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._records[record["job_id"]] = record
            self._records.move_to_end(record["job_id"])
            while len(self._records) > self.capacity:
                self._records.popitem(last=False)

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._records.get(job_id)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def serve_http(
    port: int,
    ready: threading.Event,
    metrics: ServiceMetrics,
    rankings: RecentRankings,
    host: str = "127.0.0.1",
) -> ThreadingHTTPServer:
    """Start the HTTP endpoints on ``host:port`` (port 0: any free one) in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path  # a query string (a scraper's, say) is ignored
            if path == "/healthz":
                ok = ready.is_set()
                self._send(200 if ok else 503, {"status": "ready" if ok else "recovering"})
            elif path == "/metrics":
                self._send_bytes(200, metrics.exposition(), "text/plain; version=0.0.4")
            elif path.startswith("/rankings/"):
                # a job id travels percent-encoded: "team a/job 7" as team%20a%2Fjob%207
                record = rankings.get(unquote(path.removeprefix("/rankings/")))
                if record is None:
                    self._send(404, {"error": "no ranking for that job_id on this worker"})
                else:
                    self._send(200, record)
            else:
                self._send(404, {"error": f"no such path: {path}"})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, default=_json_default).encode()
            self._send_bytes(status, data, "application/json")

        def _send_bytes(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # requests are not worth a log line each

    server = _Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="leap-http", daemon=True).start()
    return server


class _Server(ThreadingHTTPServer):
    """The endpoints' server: a probe and a scrape at once must not wait for a retried SYN
    (the default backlog of 5: seconds, with 64 clients), and a client that hangs up early is
    not an error worth a traceback."""

    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

"""The worker's HTTP endpoints, on a real socket."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from leap_stream.streaming.web import RecentRankings, ServiceMetrics, serve_http


@pytest.fixture
def endpoints() -> Iterator[tuple[str, RecentRankings, threading.Event]]:
    ready, rankings = threading.Event(), RecentRankings()
    server = serve_http(0, ready, ServiceMetrics(), rankings)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", rankings, ready
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_a_ranking_is_found_by_its_job_id_percent_encoded(endpoints) -> None:
    base, rankings, _ = endpoints
    for job_id in ("team a/job 7", "jöb-ü", "job#1?x", "plain-1"):
        rankings.put({"job_id": job_id, "abstained": False})
        status, body = _get(f"{base}/rankings/{quote(job_id, safe='')}")
        assert status == 200 and json.loads(body)["job_id"] == job_id
    assert _get(f"{base}/rankings/unknown")[0] == 404


def test_a_query_string_does_not_hide_an_endpoint(endpoints) -> None:
    base, rankings, ready = endpoints
    rankings.put({"job_id": "j-1", "abstained": False})
    assert _get(f"{base}/healthz?verbose=1")[0] == 503  # recovering
    ready.set()
    assert _get(f"{base}/healthz?verbose=1")[0] == 200
    status, body = _get(f"{base}/metrics?name[]=leap_rankings_published")
    assert status == 200 and b"leap_rankings_published" in body
    assert _get(f"{base}/rankings/j-1?fields=all")[0] == 200
    assert _get(f"{base}/nowhere?x=1")[0] == 404


@pytest.mark.integration
def test_serve_on_a_port_taken_says_so_on_one_line(kafka_bootstrap: str, fleet_topics) -> None:
    topics = fleet_topics(partitions=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = [
            *(sys.executable, "-m", "leap_stream", "serve", "--bootstrap", kafka_bootstrap),
            *("--topic-prefix", topics.prefix, "--partitions", "1", "--web-port", str(port)),
        ]
        result = subprocess.run(serve, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert f"error: --web-port {port}: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr

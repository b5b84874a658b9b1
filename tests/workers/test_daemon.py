"""The worker daemon's parts without processes: options, the link's backoff and logging, result posts.

The daemon as a whole (real processes, a real coordinator) is tested in tests/e2e/test_workers.py.
"""

from __future__ import annotations

import json
import os
import threading
import uuid

import httpx
import pytest

from workers import protocol as P
from workers.config import WorkerConfig, WorkerError, core_text, parse_cores
from workers.daemon import WorkerDaemon
from workers.link import Link, Rejected, Unreachable

URL = "http://coordinator.invalid:8000"


def _config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {
        "coordinator": URL,
        "token": "lt_t",
        "backoff_seconds": 0.001,
        "max_backoff_seconds": 0.004,
    }
    values.update(overrides)
    return WorkerConfig(**values)  # type: ignore[arg-type]


def test_cores_lists() -> None:
    usable = sorted(os.sched_getaffinity(0))
    assert parse_cores(str(usable[0])) == (usable[0],)
    assert parse_cores(f"{usable[0]}-{usable[-1]}") == tuple(range(usable[0], usable[-1] + 1))
    assert core_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    for bad, says in (
        ("a", "expected a list"),
        ("3-1", "bad range"),
        ("-1", "expected a list"),
        ("100000", "not available"),
    ):
        with pytest.raises(WorkerError, match=says):
            parse_cores(bad)


def test_config_is_checked() -> None:
    with pytest.raises(WorkerError, match="http:// or https://"):
        _config(coordinator="coordinator:8000")
    with pytest.raises(WorkerError, match="no token"):
        _config(token="")
    with pytest.raises(WorkerError, match="--threads 2 needs at least 2 cores"):
        _config(threads=2, cores=(0,))


def _link(handler, **overrides: object) -> tuple[Link, list[str], threading.Event]:
    logs: list[str] = []
    stop = threading.Event()
    link = Link(_config(**overrides), stop, logs.append)
    link.http = httpx.Client(
        base_url=URL, transport=httpx.MockTransport(handler), headers=link.http.headers
    )
    return link, logs, stop


def test_the_link_retries_with_backoff_and_logs_each_change_once() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        assert request.headers["Authorization"] == "Bearer lt_t"
        if len(calls) <= 3:
            raise httpx.ConnectError("refused")
        if len(calls) <= 5:
            return httpx.Response(503, json={"detail": "the database is unavailable"})
        return httpx.Response(200, json={"ok": len(calls)})

    link, logs, _ = _link(handler)
    assert link.call("/v1/workers/1/heartbeat") == {"ok": 6}
    assert link.failures == 5
    assert (
        len(logs) == 2
        and "unreachable (ConnectError: refused)" in logs[0]
        and logs[1].endswith("reachable again")
    )
    assert calls[0].content == b""  # a heartbeat has no body


def test_the_link_gives_up_when_asked_and_raises_4xx() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("slow")

    link, logs, stop = _link(down)
    with pytest.raises(Unreachable, match="ConnectTimeout"):
        link.call("/x", retry=False)
    stop.set()
    with pytest.raises(Unreachable):
        link.call("/x")  # a stopping worker does not wait
    assert len(logs) == 1

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json={"detail": [{"loc": ["body", "target"], "msg": "bad target"}]}
        )

    link, logs, _ = _link(refuse)
    with pytest.raises(Rejected) as e:
        link.call("/v1/workers", {"name": "w", "target": "x"})
    assert e.value.status == 422 and e.value.message == "body.target: bad target" and logs == []


def _result(candidate_id: int) -> P.Result:
    return P.Result(
        candidate_id=candidate_id, record_id=str(uuid.uuid4()), status="ok", run_times_ms=(1.0,)
    )


def test_a_409_post_is_split_and_only_the_stale_result_is_dropped() -> None:
    """One stale lease refuses a whole post; the others are posted again, one by one, with their record ids."""
    posts: list[list[dict]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        results = json.loads(request.content)["results"]
        posts.append(results)
        if any(r["candidate_id"] == 2 for r in results):
            return httpx.Response(
                409, json={"detail": "worker 1 no longer holds the lease on candidate(s) 2"}
            )
        return httpx.Response(
            200, json={"accepted": [r["candidate_id"] for r in results], "duplicates": []}
        )

    logs: list[str] = []
    daemon = WorkerDaemon(_config(cores=(sorted(os.sched_getaffinity(0))[0],)), log=logs.append)
    daemon.link.http = httpx.Client(base_url=URL, transport=httpx.MockTransport(handler))
    daemon.worker_id = 1
    batch = [_result(1), _result(2), _result(3)]
    daemon._unsent = list(batch)
    assert daemon._send_results(retry=False) is True
    assert daemon._unsent == [] and daemon.reported == 3
    assert [[r["candidate_id"] for r in p] for p in posts] == [[1, 2, 3], [1], [2], [3]]
    assert posts[1][0]["record_id"] == batch[0].to_json()["record_id"]  # resent unchanged
    assert logs == [
        "result of candidate 2 dropped: worker 1 no longer holds the lease on candidate(s) 2"
    ]
    assert daemon._send_results(retry=False) is False  # nothing left


def test_unsent_results_are_kept_while_the_coordinator_is_away() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    daemon = WorkerDaemon(_config(cores=(sorted(os.sched_getaffinity(0))[0],)), log=lambda m: None)
    daemon.link.http = httpx.Client(base_url=URL, transport=httpx.MockTransport(down))
    daemon.worker_id = 1
    daemon._unsent = [_result(1)]
    assert daemon._send_results(retry=False) is True
    assert len(daemon._unsent) == 1  # posted again later, with the same record id


def test_heartbeat_interval() -> None:
    daemon = WorkerDaemon(
        _config(cores=(sorted(os.sched_getaffinity(0))[0],)), log=lambda m: None, env={}
    )
    assert daemon._heartbeat_interval(10.0, 60.0) == 10.0
    assert daemon._heartbeat_interval(30.0, 60.0) == 20.0  # never more than a third of the lease
    daemon.env = {"LOOMTUNE_HEARTBEAT_SECONDS": "2"}
    assert daemon._heartbeat_interval(10.0, 60.0) == 2.0
    daemon.env = {"LOOMTUNE_HEARTBEAT_SECONDS": "often"}
    with pytest.raises(WorkerError, match="LOOMTUNE_HEARTBEAT_SECONDS must be a number"):
        daemon._heartbeat_interval(10.0, 60.0)
    assert (
        daemon.batch == 2
        and daemon.target.startswith("llvm -mcpu=")
        and daemon.target.endswith("-num-threads=1")
    )
    assert "cores=" in daemon.name and "llvm=" in daemon.name

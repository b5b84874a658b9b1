"""The coordinator's door against a real `loomtune serve` (uvicorn, PostgreSQL): a 50 MB body
is refused within 100 ms and the coordinator's resident memory hardly moves."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Coordinator
from tests.postgresql import fresh_pg_schema, pg_url_for

MB = 1024 * 1024


@pytest.fixture(scope="module")
def coordinator() -> Iterator[Coordinator]:
    for schema in fresh_pg_schema("loomtune_door"):
        c = Coordinator(pg_url_for(schema))
        try:
            yield c.start()
        finally:
            c.close()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def post_50mb(port: int, path: str, token: str | None, *, chunked: bool) -> tuple[int, float]:
    """Send a 50 MB POST as fast as the socket takes it; (status, seconds until the answer began)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    headers = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json"]
    if token:
        headers.append(f"Authorization: Bearer {token}")
    headers.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {50 * MB}")
    chunk = b" " * (64 * 1024)
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk

    def body() -> None:
        try:
            for _ in range(50 * MB // len(chunk)):
                sock.sendall(frame)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the coordinator answered and closed: what the test wants

    start = time.monotonic()
    sock.sendall(("\r\n".join(headers) + "\r\n\r\n").encode())
    sender = threading.Thread(target=body, daemon=True)
    sender.start()
    answer = sock.recv(64)
    elapsed = time.monotonic() - start
    sock.close()
    sender.join(10)
    return int(answer.split()[1]), elapsed


def test_50_mb_posts_are_refused_at_the_door(coordinator: Coordinator) -> None:
    c = coordinator
    assert c.proc is not None
    worker = c.token("worker", "lab")
    before = rss_mib(c.proc.pid)
    seen = []
    for path, token, chunked, expected in (
        ("/v1/workers/1/results", None, False, 413),
        ("/v1/workers/1/results", None, True, 401),
        ("/v1/jobs", "lt_forged-0123456789abcdef", True, 401),
        ("/v1/workers/1/results", worker, False, 413),
        ("/v1/workers/1/results", worker, True, 413),
        ("/v1/jobs", None, False, 413),
    ):
        status, elapsed = post_50mb(int(c.url.rsplit(":", 1)[1]), path, token, chunked=chunked)
        seen.append((path, bool(token), chunked, status, round(elapsed * 1e3, 1)))
        assert status == expected, seen
        assert elapsed < 0.1, seen
    grown = rss_mib(c.proc.pid) - before
    print(f"\n50 MB posts: {seen}; coordinator RSS grew {grown:.1f} MiB")
    assert grown < 20, f"the coordinator's RSS grew {grown:.1f} MiB"


def test_a_job_nobody_can_measure_does_not_hold_up_a_host_job(coordinator: Coordinator) -> None:
    import httpx

    from tests.e2e.cluster import Worker, core_list

    c = coordinator
    worker = Worker(c.url, c.token("worker", "lab"), core_list()[0])
    try:
        worker.ready()
        http = httpx.Client(
            base_url=c.url, headers={"Authorization": f"Bearer {c.token('client', 'alice')}"}
        )
        stuck = {
            "workload": {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}},
            "target": "llvm -mcpu=skylake -num-threads=1",
            "trials": 4,
        }
        first = http.post("/v1/jobs", json=stuck).json()
        time.sleep(1.5)  # the runner has looked at the queue at least once
        start = time.monotonic()
        host = http.post(
            "/v1/jobs",
            json={"workload": {"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}}, "trials": 3},
        ).json()
        while http.get(f"/v1/jobs/{host['id']}").json()["status"] == "queued":
            assert time.monotonic() - start < 5, "the host job waited on the stuck one"
            time.sleep(0.05)
        waited = time.monotonic() - start
        while http.get(f"/v1/jobs/{host['id']}").json()["status"] == "running":
            assert time.monotonic() - start < 60
            time.sleep(0.1)
        done = time.monotonic() - start
        shown = http.get(f"/v1/jobs/{first['id']}").json()
        print(f"\nhost job started {waited:.2f} s after submission, done in {done:.1f} s")
        assert http.get(f"/v1/jobs/{host['id']}").json()["status"] == "succeeded"
        # queued, shown as waiting while no live worker serves its target
        assert shown["status"] == "waiting" and "no live worker" in shown["waiting_reason"]
    finally:
        worker.stop()

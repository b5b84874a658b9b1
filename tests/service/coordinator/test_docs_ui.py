"""/docs and /redoc work on a cluster with no way out: every file they load is the coordinator's."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from service.coordinator.app import create_app
from tests.service.coordinator.apikit import Api

LINKS = re.compile(r"""(?:src|href|spec-url)=["']([^"']+)["']|url: ["']([^"']+)["']""")


def _links(html: str) -> list[str]:
    return [a or b for a, b in LINKS.findall(html)]


@pytest.mark.parametrize(
    ("page", "kinds"),
    [("/docs", {"javascript", "css", "image/png"}), ("/redoc", {"javascript", "image/png"})],
)
def test_the_api_pages_load_only_the_coordinators_own_files(
    sqlite_api: Api, page: str, kinds: set[str]
) -> None:
    r = sqlite_api.http.get(page)
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    links = _links(r.text)
    assert "/openapi.json" in links
    assert "googleapis" not in r.text  # ReDoc's fonts from Google: off
    served = set()
    for url in links:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url}"
        got = sqlite_api.http.get(url)
        assert got.status_code == 200, url
        assert len(got.content) > 1000, url  # a real script, style or icon, not an empty file
        served.update(k for k in kinds if k in got.headers["content-type"])
    assert served == kinds, f"{page} loads no {kinds - served}"


def test_an_unknown_asset_is_404(sqlite_api: Api) -> None:
    assert sqlite_api.http.get("/docs/assets/nothing.js").status_code == 404
    assert sqlite_api.http.get("/docs/assets/../../pyproject.toml").status_code == 404


@contextmanager
def _serving(database_url: str) -> Iterator[str]:
    """The coordinator over real HTTP (uvicorn in a thread); its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(database_url), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (.ci/run installs Debian's package)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def test_swagger_ui_renders_with_the_outside_unreachable(sqlite_url: str, tmp_path: Path) -> None:
    chromium = _chromium()
    with _serving(sqlite_url) as base:
        # Every host name but the coordinator's address fails to resolve: a CDN is unreachable.
        proc = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-proxy-server",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=3000",
                "--dump-dom",
                f"{base}/docs",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # Swagger UI drew the API: its title from the OpenAPI document and the operations.
    assert re.search(r'class="title">\s*loomtune coordinator', dom), dom[-2000:]
    assert "/v1/jobs" in dom and "opblock" in dom

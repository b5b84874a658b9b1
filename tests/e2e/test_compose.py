"""docker-compose.yml: valid for `docker-compose config`, and running the commands the end-to-end tests run.

CI installs Debian's docker-compose (`.ci/run`); without it this test skips
locally and fails under CI=true. No Docker daemon is needed: `config` only
reads and checks the file.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cli.coordinator import DEFAULT_PORT
from tests.e2e.cluster import (
    COORDINATOR_COMMANDS,
    ROOT,
    WORKER_COMMAND,
    WORKER_TOKEN_COMMAND,
    Coordinator,
    docker_compose,
    fill,
    normalise,
)

COMPOSE = ROOT / "docker-compose.yml"
ENV = {"LOOMTUNE_ADMIN_TOKEN": "lt_compose-check-0123456789"}


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _commands(service: dict[str, Any]) -> list[tuple[str, ...]]:
    """The loomtune commands a service runs: `sh -c "a && exec b"` is [a, b]."""
    argv = service["command"]
    assert isinstance(argv, list), "write commands as lists (exec form)"
    if argv[:2] != ["sh", "-c"]:
        return [tuple(argv)]
    out = []
    for part in argv[2].split("&&"):
        words = shlex.split(part.strip().strip("{};"))
        words = words[1:] if words[:1] == ["exec"] else words
        if words[:1] == [
            "test"
        ]:  # `test -s FILE || { loomtune token create ... > FILE && tail ... }`
            words = shlex.split(part.split("||", 1)[1].strip().lstrip("{").strip())
        cut = words.index(">") if ">" in words else len(words)
        if words[:1] == ["loomtune"]:
            out.append(tuple(words[:cut]))
    return out


def test_compose_file_is_valid() -> None:
    exe = docker_compose()
    if exe is None:
        message = "docker-compose is not installed (apt-get install docker-compose)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; .ci/run installs it")
        pytest.skip(message)
    env = {**os.environ, **ENV}
    done = subprocess.run(
        [exe, "-f", str(COMPOSE), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # Without an admin token the file refuses to start a coordinator, saying why.
    env.pop("LOOMTUNE_ADMIN_TOKEN")
    done = subprocess.run(
        [exe, "-f", str(COMPOSE), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "LOOMTUNE_ADMIN_TOKEN" in done.stderr


def test_compose_runs_the_commands_the_e2e_tests_run() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", "coordinator", "worker-token", "worker-1", "worker-2"}

    coordinator = services["coordinator"]
    compose_coordinator = [normalise(c) for c in _commands(coordinator)]
    assert compose_coordinator == [normalise(c) for c in COORDINATOR_COMMANDS]
    assert [normalise(c) for c in _coordinator_stub().argv()] == compose_coordinator
    assert "--host" in coordinator["command"][2] and "0.0.0.0" in coordinator["command"][2]
    assert f"{DEFAULT_PORT}:{DEFAULT_PORT}" in coordinator["ports"]
    assert "LOOMTUNE_ADMIN_TOKEN" in coordinator["environment"]
    assert coordinator["environment"]["LOOMTUNE_DATABASE_URL"].startswith("postgresql://")
    assert coordinator["depends_on"]["postgres"]["condition"] == "service_healthy"

    (token_step,) = _commands(services["worker-token"])
    assert normalise(token_step) == normalise(WORKER_TOKEN_COMMAND)

    for name, cores in (("worker-1", "0"), ("worker-2", "1")):
        worker = services[name]
        (argv,) = _commands(worker)
        assert normalise(argv) == normalise(WORKER_COMMAND)
        assert normalise(
            fill(WORKER_COMMAND, url="http://127.0.0.1:1", token="lt_x", cores="0")
        ) == normalise(argv)
        assert argv[argv.index("--coordinator") + 1] == f"http://coordinator:{DEFAULT_PORT}"
        assert argv[argv.index("--cores") + 1] == cores
        assert (
            "environment" not in worker
        )  # a worker reaches the coordinator only, never the database
        assert worker["depends_on"]["worker-token"]["condition"] == "service_completed_successfully"


def _coordinator_stub() -> Coordinator:
    """A Coordinator's commands without starting anything (no database needed)."""
    stub = Coordinator.__new__(Coordinator)
    stub.port = 1
    stub.tls = None
    return stub


def test_dockerfile_builds_the_package_the_commands_come_from() -> None:
    import tomllib

    dockerfile = (ROOT / "Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    for pattern in packages:  # every package the wheel has is copied into the image
        folder = pattern.rstrip("*")
        assert f"COPY {folder} {folder}" in dockerfile, folder
        assert Path(ROOT / folder).is_dir()
    assert "pip install ." in dockerfile and "USER loomtune" in dockerfile

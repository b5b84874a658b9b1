"""`loomtune worker`'s options: a bad one is one line and exit 2, before any connection."""

from __future__ import annotations

import pytest

from service.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--idle-seconds", "0"], "expected a positive number, got 0"),
        (["--idle-seconds", "soon"], "expected a positive number, got 'soon'"),
        (["--threads", "0"], "expected a positive integer, got 0"),
    ],
)
def test_a_bad_worker_option_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    full = ["worker", "--coordinator", "http://127.0.0.1:1", "--token", "lt_x", *argv]
    assert main(full) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomtune: error: worker: ") and err.count("\n") == 1, err
    assert message in err


def test_a_worker_needs_a_coordinator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LOOMTUNE_COORDINATOR", raising=False)
    assert main(["worker", "--token", "lt_x", "--idle-seconds", "0.05"]) == 2
    err = capsys.readouterr().err
    assert "no coordinator: pass --coordinator URL" in err and err.count("\n") == 1

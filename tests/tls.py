"""A self-signed certificate for 127.0.0.1, for the tests that serve over TLS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files in `folder`; skips the test without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key

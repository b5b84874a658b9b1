"""Database URLs checked before an engine is made (`--database`, `LOOMTUNE_DATABASE_URL`).

A mistyped URL used to end in a SQLAlchemy traceback, and a SQLite file in a
missing folder silently created the folders and an empty database: a typo then
looked like "no records". Each mistake is now one line naming the URL and what
is wrong. The command line creates only the default file's folder (a fresh
install has none).
"""

from __future__ import annotations

import re
from pathlib import Path

from ir.errors import LoomtuneError

SUPPORTED = "sqlite:///FILE.db (an absolute path: sqlite:////abs/x.db) or postgresql://USER@HOST/DB"


class DatabaseUrlError(LoomtuneError):
    """A database URL loomtune cannot use (malformed, another driver, a missing folder)."""


def check_database_url(url: str, *, folder_must_exist: bool = True) -> str:
    """`url` unchanged when loomtune can open it; else a `DatabaseUrlError` saying why.

    The command line checks the folder (a user's typo); `make_engine` creates it
    (`folder_must_exist=False`) for the default file and for programs and tests.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if "://" not in url:
        raise DatabaseUrlError(f"database URL {url!r} is not a URL; use {SUPPORTED}")
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as e:
        shown = re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)  # never print a password
        raise DatabaseUrlError(
            f"database URL {shown!r} is malformed ({e}); use {SUPPORTED}"
        ) from None
    url_text = url
    url = parsed.render_as_string(hide_password=True)  # what the errors show
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if backend == "postgresql":
        if "+" in parsed.drivername and driver != "psycopg":  # plain postgresql:// is psycopg
            raise DatabaseUrlError(
                f"database URL {url!r}: driver {driver} is not installed; "
                "write postgresql://… (loomtune uses psycopg 3)"
            )
        return url_text
    if backend != "sqlite":
        raise DatabaseUrlError(
            f"database URL {url!r}: unsupported database {parsed.drivername}; use {SUPPORTED}"
        )
    database = parsed.database or ""
    if (
        folder_must_exist
        and database
        and database != ":memory:"
        and not database.startswith("file:")
    ):
        folder = Path(database).expanduser().parent
        if not folder.is_dir():
            raise DatabaseUrlError(
                f"database URL {url!r}: folder {folder} does not exist (create it first)"
            )
    return url_text

"""SQLite for the tests: a file migrated once per session, copied for each test that needs an
empty database at the current schema (the `migrated_sqlite` fixture, tests/conftest.py).

Copying the file costs milliseconds; running the migrations on a new file costs a tenth of
a second or more, and a few hundred tests start from an empty database. How the migrations
upgrade an empty or an old database is tested in tests/migrations/.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def migrated_sqlite_file(path: Path) -> Path:
    """A new SQLite file at `path`, upgraded to the newest revision, every connection closed."""
    from service.db.engine import make_engine
    from service.db.schema import check_schema, ensure_schema

    engine = make_engine(f"sqlite:///{path}")
    ensure_schema(engine)
    assert check_schema(engine) is None
    engine.dispose()  # the WAL checkpointed into the file: a copy of the file is the database
    return path


def fresh_sqlite(template: Path, path: Path) -> str:
    """The URL of a new SQLite database at `path`: a copy of the migrated `template`, so a
    test starts empty, on the current schema, without running the migrations again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"

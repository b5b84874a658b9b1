"""Alembic migrations of the tuning database, shipped as a package.

An installed loomtune upgrades its database from here: the Alembic `Config`
is built in code with `script_location` set to this folder, so no
`alembic.ini` is needed on disk (it works from a wheel).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection, Engine

SCRIPT_LOCATION = Path(__file__).resolve().parent


def alembic_config(url_or_engine: str | Engine | Connection | None = None) -> Config:
    """An Alembic config for this package; a given engine or connection is used as is."""
    from alembic.config import Config

    from service.db.engine import database_url

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if isinstance(url_or_engine, str) or url_or_engine is None:
        # '%' is interpolation syntax in Alembic's config parser.
        config.set_main_option("sqlalchemy.url", database_url(url_or_engine).replace("%", "%%"))
    else:
        config.attributes["connection"] = url_or_engine
    return config


def head_revision() -> str:
    """The newest revision this loomtune knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def upgrade(url_or_engine: str | Engine | Connection | None = None, revision: str = "head") -> None:
    """Upgrade the database to `revision` (default: the newest)."""
    from alembic import command

    command.upgrade(alembic_config(url_or_engine), revision)


def downgrade(url_or_engine: str | Engine | Connection | None, revision: str) -> None:
    """Downgrade the database to `revision` ("base": no tables)."""
    from alembic import command

    command.downgrade(alembic_config(url_or_engine), revision)

"""The coordinator's FastAPI application: `create_app()`.

It opens the tuning database (creating the schema when empty, upgrading the
embedded SQLite file, refusing any other stale schema: `StaleSchemaError`),
stores the hash of `LOOMTUNE_ADMIN_TOKEN` as the first admin token, and mounts
a router per resource under /v1 plus /healthz and /metrics. OpenAPI is at
/docs. Errors are JSON: `{"detail": "..."}`, and for 422 FastAPI's list of
`{"loc", "msg", "type"}` naming each field.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.coordinator.deps import CoordinatorState, State, lookup_caller
from service.coordinator.docs_ui import add_docs
from service.coordinator.errors import ApiError, Invalid, Unauthorized
from service.coordinator.gate import Gate
from service.coordinator.metrics import Metrics
from service.coordinator.routes import jobs, schedules, targets, tokens, workers, workloads
from service.coordinator.schemas import Health
from service.coordinator.settings import METRICS_TOKEN_ENV, Settings
from service.coordinator.tokens import CallerCache, ensure_admin_token
from service.db.engine import make_engine
from service.db.schema import ensure_schema
from service.db.session import Sessions
from service.db.store import DatabaseUnavailableError

log = logging.getLogger("loomtune.coordinator")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("loomtune")
    except metadata.PackageNotFoundError:
        return "0+unknown"


POOL_SIZE = 20
POOL_OVERFLOW = 40
"""Connections kept and allowed beyond them: uvicorn runs up to 40 requests at once in threads,
each holding at most one connection at a time."""


def open_engine(settings: Settings) -> Engine:
    """The database engine, its schema checked (what `serve` refuses to start without)."""
    engine = make_engine(settings.database_url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    try:
        ensure_schema(engine)
    except OperationalError as e:
        where = engine.url.render_as_string(hide_password=True)
        reason = str(e.orig).strip().splitlines()[0] if e.orig is not None else type(e).__name__
        engine.dispose()
        raise DatabaseUnavailableError(f"cannot open the database {where}: {reason}") from None
    except BaseException:
        engine.dispose()
        raise
    return engine


def create_app(
    database_url: str | None = None,
    *,
    settings: Settings | None = None,
    engine: Engine | None = None,
    run_jobs: bool = False,
) -> FastAPI:
    """A coordinator on `database_url` (else `settings.database_url`, else LOOMTUNE_DATABASE_URL).

    `settings` default to the environment's (`Settings.from_env`). A given
    `engine` is used as is (its schema still checked) and not disposed. With
    `run_jobs` (what `loomtune serve` does) a job runner thread drives queued
    jobs while the app runs (`service/coordinator/runner.py`).
    """
    settings = settings if settings is not None else Settings.from_env(database_url=database_url)
    if database_url is not None and settings.database_url != database_url:
        from dataclasses import replace

        settings = replace(settings, database_url=database_url)
    owned = engine is None
    if engine is None:
        engine = open_engine(settings)
    else:
        ensure_schema(engine)
    sessions = Sessions(engine)
    if settings.metrics_token is None:
        log.warning(
            "/metrics is open to anyone who can reach this coordinator; set %s to require a token",
            METRICS_TOKEN_ENV,
        )
    if settings.admin_token:
        with sessions.write() as session:
            ensure_admin_token(session, settings.admin_token)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        runner = None
        if run_jobs:
            from service.coordinator.runner import JobRunnerService

            runner = JobRunnerService(engine, lease_seconds=settings.lease_seconds)
            runner.start()
        try:
            yield
        finally:
            if runner is not None:
                runner.stop()
            if owned:
                engine.dispose()

    app = FastAPI(
        title="loomtune coordinator",
        version=_version(),
        description="Tuning jobs, the tuning database and measurement workers over REST (v1). "
        "Authenticate with `Authorization: Bearer <token>` (`loomtune token create`).",
        docs_url=None,  # /docs and /redoc without a CDN: docs_ui.add_docs
        redoc_url=None,
        lifespan=lifespan,
    )
    state = CoordinatorState(
        settings, sessions, Metrics(sessions, settings), CallerCache(settings.auth_cache_seconds)
    )
    app.state.loomtune = state
    app.add_middleware(
        Gate,
        max_body_bytes=settings.max_body_bytes,
        authenticate=functools.partial(lookup_caller, state),
    )
    for module in (jobs, schedules, workloads, targets, tokens, workers):
        app.include_router(module.router)
    _add_error_handlers(app)
    _add_health_and_metrics(app)
    add_docs(app)
    return app


def _json_safe(value: object) -> object:
    """`value` with what JSON cannot carry (NaN, Infinity, bytes, objects) as text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


def validation_errors(errors: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """FastAPI's 422 list, each error's `loc`, `msg` and `type` (and its input when
    small), always serialisable: a body with `Infinity` in it is answered, not a 500."""
    out = []
    for e in errors:
        item: dict[str, object] = {
            "loc": _json_safe(list(e.get("loc", ()))),  # type: ignore[call-overload]
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "value_error")),
        }
        given = e.get("input")
        if isinstance(given, float | int | bool) or (isinstance(given, str) and len(given) < 200):
            item["input"] = _json_safe(given)
        out.append(item)
    return out


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_errors(exc.errors())}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI's "error parsing the body": not UTF-8 JSON
            error = {"loc": ["body"], "msg": "the body is not JSON text", "type": "json_invalid"}
            return JSONResponse({"detail": [error]}, status_code=422)
        return JSONResponse(
            {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        if isinstance(exc, Invalid):
            return JSONResponse({"detail": exc.errors()}, status_code=422)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=headers)

    @app.exception_handler(OperationalError)
    async def database_down(_request: Request, exc: OperationalError) -> JSONResponse:
        # The database went away (restart, network) or stayed locked: not a bug of the request.
        log.warning(
            "database unavailable: %s", str(exc.orig).strip().splitlines()[0] if exc.orig else exc
        )
        return JSONResponse({"detail": "the database is unavailable; retry later"}, status_code=503)

    @app.exception_handler(PoolTimeoutError)
    async def too_busy(_request: Request, exc: PoolTimeoutError) -> JSONResponse:
        log.warning("no database connection free: %s", exc)
        return JSONResponse(
            {"detail": "the coordinator is overloaded; retry later"}, status_code=503
        )


def _add_health_and_metrics(app: FastAPI) -> None:
    @app.get(
        "/healthz",
        response_model=Health,
        tags=["health"],
        summary="Liveness (and the database)",
        responses={503: {"description": "the database is unavailable"}},
    )
    def healthz(state: State) -> Health | JSONResponse:
        import migrations

        try:
            with state.sessions.read() as session:
                session.execute(text("SELECT 1"))
        except SQLAlchemyError:
            return JSONResponse({"detail": "the database is unavailable"}, status_code=503)
        return Health(status="ok", schema_revision=migrations.head_revision())

    @app.get(
        "/metrics",
        tags=["health"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={401: {"description": "LOOMTUNE_METRICS_TOKEN is set and was not sent"}},
    )
    def metrics(state: State, request: Request) -> Response:
        """Open unless LOOMTUNE_METRICS_TOKEN is set; then only with that bearer secret."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        wanted = state.settings.metrics_token
        if wanted is not None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), wanted.encode()
            ):
                raise Unauthorized("/metrics needs the LOOMTUNE_METRICS_TOKEN bearer secret")

        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

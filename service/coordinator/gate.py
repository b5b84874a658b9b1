"""The door of the coordinator: body size and bearer token, before any body is read.

An ASGI middleware in front of the routes. For every HTTP request it

1. answers 413 when `Content-Length` says the body is larger than
   LOOMTUNE_MAX_BODY_BYTES (nothing of it read);
2. answers 401 to a request under /v1/ without a bearer token the coordinator
   knows (the lookup is the one the routes use, cached the same way): a
   stranger's body is never read, let alone parsed;
3. counts the body as the route reads it (a chunked body has no length) and
   stops it with 413 at the limit.

Without this, FastAPI reads and parses the whole body before a route's
dependencies (and their token check) run: two 50 MB posts without a token
took a coordinator from 193 to 734 MiB (docs/decisions.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.coordinator.tokens import Caller

PROTECTED_PREFIX = "/v1/"
CALLER_KEY = "loomtune.caller"
"""Where the gate leaves the caller it authenticated, in the request's scope."""


class BodyTooLarge(HTTPException):
    """A streamed body crossed the limit (FastAPI lets an HTTPException through its body reader)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"the request body is larger than {limit} bytes (LOOMTUNE_MAX_BODY_BYTES)"
        )


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            return secret.strip() or None if scheme.lower() == "bearer" else None
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None


async def _answer(
    send: Send, status: int, detail: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    # The rest of the body is not read: the connection cannot carry another request.
    raw.append((b"connection", b"close"))
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Gate:
    """The middleware; `authenticate(secret)` is the routes' own lookup (blocking: run in a thread)."""

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, authenticate: Callable[[str], Caller | None]
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and not 0 <= length <= self.max_body_bytes:
            await _answer(send, 413, str(BodyTooLarge(self.max_body_bytes).detail))
            return
        if scope.get("path", "").startswith(PROTECTED_PREFIX):
            secret = _bearer(scope)
            if secret is None:
                await _answer(
                    send,
                    401,
                    "no bearer token (Authorization: Bearer <token>)",
                    {"WWW-Authenticate": "Bearer"},
                )
                return
            caller = await run_in_threadpool(self.authenticate, secret)
            if caller is None:
                await _answer(
                    send,
                    401,
                    "the bearer token is unknown or revoked",
                    {"WWW-Authenticate": "Bearer"},
                )
                return
            scope[CALLER_KEY] = caller
        seen = 0
        limit = self.max_body_bytes

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)

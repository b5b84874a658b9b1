"""`loomtune serve` and `loomtune token create|list|revoke`: run a coordinator and manage its tokens.

`token` writes the database directly (no coordinator needed), so the first
tokens of a cluster can be made before `serve` starts; the secret is printed
once, alone on the last line of stdout (with --json: in the one JSON object).
"""

from __future__ import annotations

import argparse
import errno
import socket
from pathlib import Path
from typing import Any

from ir.errors import LoomtuneError
from service.cli.common import Parser, UsageError, log, print_json

ROLES = ("admin", "client", "worker")
"""`service.coordinator.tokens.ROLES`, spelt here so building the parser does not import SQLAlchemy."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


class TokenError(LoomtuneError):
    """A token that cannot be made or found."""


def add_coordinator_parsers(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the coordinator (REST API; refuses a stale schema)")
    serve.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--ssl-certfile", metavar="F", help="TLS certificate (PEM); with --ssl-keyfile, serve HTTPS"
    )
    serve.add_argument("--ssl-keyfile", metavar="F", help="TLS private key (PEM)")
    serve.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug")
    )

    token = sub.add_parser("token", help="API tokens of the coordinator: create, list, revoke")
    token_sub = token.add_subparsers(dest="token_command", required=True, parser_class=Parser)
    create = token_sub.add_parser(
        "create", help="create a token; prints its secret once, on the last line"
    )
    create.add_argument("--role", required=True, choices=ROLES, help="admin, client or worker")
    create.add_argument(
        "--owner", metavar="NAME", help="who its jobs belong to (default: the role)"
    )
    create.add_argument(
        "--json", action="store_true", help="print one JSON object (with the secret)"
    )
    listing = token_sub.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    revoke = token_sub.add_parser("revoke", help="revoke a token: it is refused from now on")
    revoke.add_argument("id", type=int, metavar="ID", help="the token's id (see `token list`)")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {value}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    """Check the schema and settings, then serve until interrupted."""

    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        raise UsageError("--ssl-certfile and --ssl-keyfile go together")
    for option, path in (
        ("--ssl-certfile", args.ssl_certfile),
        ("--ssl-keyfile", args.ssl_keyfile),
    ):
        if path is not None and not Path(path).is_file():
            raise UsageError(f"{option}: no such file {path!r}")
    sock = listen_socket(args.host, args.port)  # a busy port is one line, before anything starts
    try:
        import uvicorn

        from service.coordinator.app import create_app
        from service.coordinator.settings import Settings

        settings = Settings.from_env()
        # A stale schema is refused here, before the port accepts a connection.
        app = create_app(settings=settings, run_jobs=True)
        scheme = "https" if args.ssl_certfile else "http"
        port = sock.getsockname()[1]  # the one the system chose when --port is 0
        log(f"loomtune coordinator on {scheme}://{_where(args.host, port)} (OpenAPI at /docs)")
        config = uvicorn.Config(
            app,
            host=args.host,
            port=port,
            ssl_certfile=args.ssl_certfile,
            ssl_keyfile=args.ssl_keyfile,
            log_level=args.log_level,
            # One process: on SQLite that is the one coordinator; on PostgreSQL run more `serve`s.
            workers=None,
        )
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down gracefully, then raised the Ctrl-C again
        return 0
    finally:
        sock.close()
    if not server.started:
        raise ServeError("the coordinator did not start (see the log above)")
    return 0


class ServeError(LoomtuneError):
    """The coordinator cannot listen where it was asked to."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port`, or a `ServeError` saying what to do about it.

    `serve` binds before it opens the database or starts uvicorn, so a port another
    process holds is one line instead of uvicorn's start-up and shut-down log."""
    where = _where(host, port)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise ServeError(
            f"cannot listen on {where}: unknown host ({e.strerror}); check --host"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {where}: {_bind_advice(e)}") from None
    return sock


def _bind_advice(e: OSError) -> str:
    if e.errno == errno.EADDRINUSE:
        return "the port is in use (another coordinator?); stop that process or pass --port N"
    if e.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); pass --port N"
    if e.errno == errno.EADDRNOTAVAIL:
        return "no such address on this machine; pass --host with one of its addresses"
    return f"{e.strerror or e}"


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cmd_token(args: argparse.Namespace) -> int:
    from service.coordinator import tokens
    from service.coordinator.errors import ApiError, Invalid
    from service.db.session import Sessions, as_utc, as_utc_or_none
    from service.db.store import open_database

    sessions = Sessions(open_database().engine)

    def view(t: Any) -> dict[str, Any]:
        revoked = as_utc_or_none(t.revoked_at)
        return {
            "id": t.id,
            "role": t.role,
            "owner": t.owner,
            "created_at": as_utc(t.created_at).isoformat(),
            "revoked_at": revoked.isoformat() if revoked else None,
        }

    try:
        if args.token_command == "create":
            with sessions.write() as session:
                token, secret = tokens.create_token(session, args.role, args.owner)
                shown = view(token)
            if args.json:
                print_json({**shown, "secret": secret})
            else:
                print(
                    f"created {shown['role']} token {shown['id']} for owner {shown['owner']}; "
                    "the secret below is shown this once"
                )
                print(secret)
            return 0
        if args.token_command == "list":
            with sessions.read() as session:
                rows = [view(t) for t in tokens.list_tokens(session)]
            if args.json:
                print_json({"tokens": rows})
            else:
                print(f"{'id':>5}  {'role':<7} {'owner':<24} {'created':<33} revoked")
                for r in rows:
                    print(
                        f"{r['id']:>5}  {r['role']:<7} {r['owner']:<24} {r['created_at']:<33} {r['revoked_at'] or '-'}"
                    )
            return 0
        with sessions.write() as session:
            shown = view(tokens.revoke_token(session, args.id))
        print(f"revoked token {shown['id']} ({shown['role']}, owner {shown['owner']})")
        return 0
    except Invalid as e:
        raise TokenError(f"--{e.loc[-1]}: {e.msg}") from None
    except ApiError as e:
        raise TokenError(e.detail) from None
    finally:
        sessions.engine.dispose()

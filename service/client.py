"""`loomtune.Client`: the coordinator's REST API (v1) from Python, over httpx with a bearer token.

    import loomtune
    with loomtune.Client("http://tuner:8000", token="lt_...") as c:
        job = c.submit("matmul", {"m": 512, "n": 512, "k": 512}, trials=256)
        job = c.wait(job["id"], on_progress=lambda j: print(j["trials_done"]))
        job = c.submit_model("bert.onnx", trials=512)      # the structure only: no weights sent
        best = c.best("matmul", {"m": 512, "n": 512, "k": 512})
        open("mm.trace.json", "w").write(json.dumps(best["trace_file"]))   # `loomtune apply` replays it

Answers are the API's JSON objects as dicts (the fields of `service/coordinator/schemas.py`:
a job has `id`, `status`, `trials`, `trials_done`, `best_latency_ms`, `error`,
`waiting_reason`, ...). The URL and token default to LOOMTUNE_COORDINATOR and
LOOMTUNE_TOKEN. Every refusal of the API (4xx, 5xx) raises `CoordinatorError`
with the HTTP status and the API's message (for 422: each field named, as
`body.trials: ...`); a coordinator that cannot be reached raises
`CoordinatorUnreachable` (a `CoordinatorError` whose status is None).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from ir.errors import LoomtuneError

COORDINATOR_ENV = "LOOMTUNE_COORDINATOR"
TOKEN_ENV = "LOOMTUNE_TOKEN"
FINISHED = ("succeeded", "failed", "cancelled")
"""Job statuses that do not change any more."""


class CoordinatorError(LoomtuneError):
    """The coordinator refused a request: `status` (HTTP) and `message` (the API's detail)."""

    def __init__(self, status: int | None, message: str, *, detail: Any = None) -> None:
        super().__init__(
            f"coordinator: {status} {message}" if status is not None else f"coordinator: {message}"
        )
        self.status = status
        self.message = message
        self.detail = detail
        """The API's `detail` as sent (a string, or FastAPI's list of {loc, msg, type})."""


class CoordinatorUnreachable(CoordinatorError):
    """No answer from the coordinator (connection refused, timeout, TLS failure)."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)


def api_message(detail: Any) -> str:
    """One line from an API error's `detail`: the text, or every `loc: msg` of a 422."""
    if isinstance(detail, list):
        parts = []
        for d in detail:
            if isinstance(d, dict):
                loc = ".".join(str(p) for p in d.get("loc", []))
                parts.append(f"{loc}: {d.get('msg', '')}" if loc else str(d.get("msg", "")))
            else:
                parts.append(str(d))
        return "; ".join(parts)
    return str(detail)


Workload = str | Mapping[str, Any] | Path


def workload_spec(workload: Workload, params: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The API's `{"op", "params"}` or `{"definition", "params"}` for an operator name,
    a definition (dict) or the path of a definition file (`*.json`)."""
    params = {k: _int_param(k, v) for k, v in (params or {}).items()}
    if isinstance(workload, Path) or (isinstance(workload, str) and workload.endswith(".json")):
        try:
            definition = json.loads(Path(workload).read_text(encoding="utf-8"))
        except OSError as e:
            raise LoomtuneError(f"cannot read {workload}: {e.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LoomtuneError(f"{workload}: not a JSON workload definition ({e})") from None
        return {"definition": definition, "params": params}
    if isinstance(workload, str):
        return {"op": workload, "params": params}
    if isinstance(workload, Mapping):
        if "op" in workload or "definition" in workload:  # already a spec
            spec = dict(workload)
            spec["params"] = {**dict(spec.get("params") or {}), **params}
            return spec
        return {"definition": dict(workload), "params": params}
    raise TypeError(
        f"a workload is an operator name, a definition or its file, not {type(workload).__name__}"
    )


def _int_param(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise LoomtuneError(f"parameter {name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 10)
    except ValueError:
        raise LoomtuneError(f"parameter {name} must be an integer, got {value!r}") from None


def stripped_model(model: str | os.PathLike | Any) -> dict[str, Any]:
    """The `loomtune.graph/1` document of an ONNX file or a graph: its structure, no weights."""
    from frontend.stripped import strip_graph

    if isinstance(model, str | os.PathLike):
        from frontend.onnx import load_onnx

        model = load_onnx(model)
    return strip_graph(model)


class Client:
    """A coordinator's REST API. Use it as a context manager, or call `close()`.

    Args:
        url: the coordinator's base URL (default: LOOMTUNE_COORDINATOR).
        token: a bearer token (default: LOOMTUNE_TOKEN); a client token for
            jobs, schedules and workloads, an admin token for tokens and workers.
        timeout: seconds per request.
        verify: TLS verification: True, False, or the path of a CA bundle.
        http: an httpx.Client to send requests with (tests pass the app's
            TestClient); its base URL is used as it is.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        verify: bool | str = True,
        http: httpx.Client | None = None,
    ) -> None:
        url = url if url is not None else os.environ.get(COORDINATOR_ENV, "").strip() or None
        token = token if token is not None else os.environ.get(TOKEN_ENV, "").strip() or None
        if http is None:
            if not url:
                raise LoomtuneError(
                    f"no coordinator: pass --coordinator URL or set {COORDINATOR_ENV}"
                )
            if not url.startswith(("http://", "https://")):
                raise LoomtuneError(
                    f"the coordinator's URL must start with http:// or https://, got {url!r}"
                )
            http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, verify=verify)
            self._owns_http = True
        else:
            self._owns_http = False
        self.url = str(http.base_url).rstrip("/")
        self.http = http
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    # -- plumbing -----------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """One call: the answer's JSON; `CoordinatorError` for any status >= 400."""
        try:
            r = self.http.request(
                method, path, json=json_body, params=params, headers=self._headers
            )
        except httpx.TransportError as e:
            raise CoordinatorUnreachable(
                f"cannot reach {self.url}: {e or type(e).__name__}"
            ) from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except (ValueError, AttributeError):
                detail = r.text.strip() or r.reason_phrase
            raise CoordinatorError(r.status_code, api_message(detail), detail=detail)
        if not r.content:
            return None
        try:
            return r.json()
        except ValueError:
            return r.text

    # -- jobs ---------------------------------------------------------------------------

    def submit(
        self,
        workload: Workload,
        params: Mapping[str, int] | None = None,
        *,
        trials: int,
        target: str = "host",
        strategy: str | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Queue a tuning job; the job (201). `target="host"` means the CPU of the coordinator's workers."""
        body: dict[str, Any] = {
            "workload": workload_spec(workload, params),
            "target": target,
            "trials": trials,
        }
        if strategy is not None:
            body["strategy"] = strategy
        if seed is not None:
            body["seed"] = seed
        return self.request("POST", "/v1/jobs", json_body=body)

    def submit_model(
        self,
        model: str | os.PathLike | Any,
        *,
        trials: int,
        target: str = "host",
        strategy: str | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Queue a model job: the distinct tasks of an ONNX model (a path, or an imported
        `ir.graph.Graph`) tuned under one budget of `trials`. Only the model's structure is
        sent (`frontend.stripped`): weights travel as shapes and dtypes, never as data."""
        body: dict[str, Any] = {
            "model": stripped_model(model),
            "target": target,
            "trials": trials,
        }
        if strategy is not None:
            body["strategy"] = strategy
        if seed is not None:
            body["seed"] = seed
        return self.request("POST", "/v1/jobs", json_body=body)

    def jobs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        """The caller's jobs (an admin's: everyone's), newest first."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is not None:
            params["status"] = status
        return self.request("GET", "/v1/jobs", params=params)["jobs"]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{int(job_id)}")

    def history(self, job_id: int) -> dict[str, Any]:
        """The job's tuning curve: `points`, one per measurement, each with `best_ms` so far."""
        return self.request("GET", f"/v1/jobs/{int(job_id)}/history")

    def cancel(self, job_id: int) -> dict[str, Any]:
        """Stop a job, keeping its records; the job."""
        return self.request("POST", f"/v1/jobs/{int(job_id)}/cancel")

    def wait(
        self,
        job_id: int,
        *,
        poll_seconds: float = 1.0,
        timeout: float | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the job until it succeeds, fails or is cancelled; the last state.

        `on_progress(job)` is called after every poll. A coordinator that stops
        answering for a while (or answers 5xx) is waited out: polls keep going,
        up to `timeout` seconds in all, then `TimeoutError`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                job = self.job(job_id)
            except CoordinatorError as e:
                if e.status is not None and e.status < 500:
                    raise
                job = None  # unreachable, or 503 while its database is away: wait it out
            if job is not None:
                if on_progress is not None:
                    on_progress(job)
                if job["status"] in FINISHED:
                    return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout:g} s")
            time.sleep(
                poll_seconds
                if deadline is None
                else max(0.0, min(poll_seconds, deadline - time.monotonic()))
            )

    # -- schedules and workloads ----------------------------------------------------------

    def best(
        self,
        workload: str | None = None,
        params: Mapping[str, int] | None = None,
        *,
        workload_key: str | None = None,
        target: str = "host",
    ) -> dict[str, Any]:
        """The best-known schedule of a library operator with parameters, or of a workload key.

        The answer's `trace_file` is a `loomtune.trace/1` file `loomtune apply` replays.
        """
        query: dict[str, Any] = {"target": target}
        if workload_key is not None:
            if workload is not None or params:
                raise TypeError("give an operator (with parameters) or workload_key, not both")
            query["workload_key"] = workload_key
        else:
            if workload is None:
                raise TypeError("give an operator name (with parameters) or workload_key")
            query["op"] = workload
            for k, v in (params or {}).items():
                query[k] = _int_param(k, v)
        return self.request("GET", "/v1/schedules/best", params=query)

    def workloads(
        self, *, op: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if op is not None:
            params["op"] = op
        return self.request("GET", "/v1/workloads", params=params)["workloads"]

    def records(
        self,
        workload_key: str,
        *,
        target: str | None = None,
        status: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """A workload's records: fastest correct first, then failures."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if target is not None:
            params["target"] = target
        if status is not None:
            params["status"] = status
        return self.request("GET", f"/v1/workloads/{workload_key}/records", params=params)[
            "records"
        ]

    # -- tokens and workers (admin) -------------------------------------------------------

    def create_token(self, role: str, owner: str | None = None) -> dict[str, Any]:
        """A new token; its `secret` is in this answer only."""
        body: dict[str, Any] = {"role": role}
        if owner is not None:
            body["owner"] = owner
        return self.request("POST", "/v1/tokens", json_body=body)

    def tokens(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/tokens")["tokens"]

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/tokens/{int(token_id)}")

    def workers(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/workers")["workers"]

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/healthz")

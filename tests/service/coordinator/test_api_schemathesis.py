"""Property test of the whole OpenAPI schema (schemathesis): no request gets a 5xx, and every
answer's status, content type and body are the ones the schema lists.

Generated requests for every operation, valid ones and invalid ones, each
sent as an admin, a client or a worker (drawn per request), against a
coordinator that has a running job with candidates and a registered worker,
so ids 1 exist. At least 100 requests per operation (valid + invalid). Revoking tokens is
left out: revoking the admin's own token would end the run early.

(schemathesis' pytest integration, `from_fixture`, does not run under pytest 9:
the operations are driven with hypothesis directly.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import checks
from schemathesis.generation import GenerationMode

from tests.service.coordinator.apikit import ADMIN, ZEN, Api, make_api

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
    checks.positive_data_acceptance,
]
"""Every answer is listed in the schema (status, content type, body shape), never a 5xx; a
request the schema forbids is refused, one it allows is not refused as malformed (4xx other
than 401/403/404/409/429)."""

BEYOND_SCHEMA = {
    ("POST", "/v1/jobs"): "a workload's op must be a library operator with parameters in its "
    "bounds and a buffer size under LOOMTUNE_MAX_BYTES, a definition must build, a model "
    "must be a loomtune.graph/1 graph, trials at most LOOMTUNE_MAX_TRIALS",
    ("POST", "/v1/workers"): "a target names a CPU and features LLVM knows",
    ("GET", "/v1/schedules/best"): "exactly one of workload_key and op, and op's parameters "
    "as further query parameters (OpenAPI has no 'one of these parameters'); op as for jobs",
}
"""Operations whose valid requests depend on more than a JSON Schema can say: every check
but positive_data_acceptance runs on them (a schema-valid request may get a 422 naming the
field)."""
EXAMPLES = {GenerationMode.POSITIVE: 40, GenerationMode.NEGATIVE: 30}
"""Generated requests per operation and mode: 100 per operation in all."""


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'coordinator.db'}"
    api, client = make_api(url)
    with client:
        job = api.submit(ADMIN, trials=8)
        api.run_job(job["id"], 8)
        api.register(ADMIN, ZEN)
        api.submit(ADMIN, trials=3, op="softmax", params={"m": 4, "n": 4})
        api.secrets = [ADMIN, api.token("client", owner="alice"), api.token("worker", owner="lab")]  # type: ignore[attr-defined]
        yield api
    api.engine.dispose()


def _checks_for(operation: Any) -> list[Any]:
    if (operation.method.upper(), operation.path) in BEYOND_SCHEMA:
        return [c for c in CHECKS if c is not checks.positive_data_acceptance]
    return CHECKS


def _integral(value: Any) -> Any:
    """Integral floats as integers: JSON Schema counts 4.0 as an integer, the API does not
    (no coercion: a client writes 4), so a valid request is sent as a client writes it."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value
)
def test_no_request_is_a_server_error(coordinator: Api, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", coordinator.http.app)
    # the token is drawn per request below: a generated Authorization header would be replaced
    schema.config.generation.update(with_security_parameters=False)
    operations = [result.ok() for result in schema.get_all_operations()]
    fuzzed = [
        op
        for op in operations
        if (op.method.upper(), op.path) != ("DELETE", "/v1/tokens/{token_id}")
    ]
    assert len(fuzzed) >= 17
    secrets = coordinator.secrets  # type: ignore[attr-defined]
    calls: list[int] = []

    for operation in fuzzed:

        @given(case=operation.as_strategy(mode), secret=st.sampled_from(secrets))
        @settings(
            max_examples=EXAMPLES[mode],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any, secret: str) -> None:
            headers = {"Authorization": f"Bearer {secret}"}
            if mode is GenerationMode.POSITIVE:
                case.body = _integral(case.body)
            response = case.call(headers=headers)
            calls.append(response.status_code)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} query={case.query} body={case.body!r:.300}"
                f" -> {response.status_code}: {response.text[:300]}"
            )
            case.validate_response(response, checks=_checks_for(case.operation), headers=headers)

        try:
            check()
        except Unsatisfiable:
            # An operation with nothing to get wrong (no parameters, no body) has no invalid requests.
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert len(calls) >= len(fuzzed) * (
        EXAMPLES[mode] // 2 if mode is GenerationMode.POSITIVE else 1
    )


def test_unknown_or_repeated_query_parameters_are_422_naming_them(coordinator: Api) -> None:
    """FastAPI would ignore `limt=` and keep the last `limit=`: the caller meant something else."""
    for query, name, words in (
        ("limt=5", "limt", "unknown query parameter"),
        ("limit=1&limit=2", "limit", "more than once"),
    ):
        r = coordinator.call("GET", f"/v1/jobs?{query}", ADMIN)
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]
        assert error["loc"] == ["query", name] and words in error["msg"], error
    assert coordinator.call("GET", "/v1/jobs?limit=1&offset=0", ADMIN).status_code == 200
    # /v1/schedules/best takes an operator's parameters as further query parameters
    r = coordinator.call("GET", "/v1/schedules/best?op=matmul&m=16&n=16&k=16", ADMIN)
    assert r.status_code in (200, 404), r.text

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
]
"""Every answer is listed in the schema (status, content type, body shape), never a 5xx."""

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


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value
)
def test_no_request_is_a_server_error(coordinator: Api, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", coordinator.http.app)
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
            response = case.call(headers=headers)
            calls.append(response.status_code)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} query={case.query} body={case.body!r:.300}"
                f" -> {response.status_code}: {response.text[:300]}"
            )
            case.validate_response(response, checks=CHECKS, headers=headers)

        try:
            check()
        except Unsatisfiable:
            # An operation with nothing to get wrong (no parameters, no body) has no invalid requests.
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert len(calls) >= len(fuzzed) * (
        EXAMPLES[mode] // 2 if mode is GenerationMode.POSITIVE else 1
    )

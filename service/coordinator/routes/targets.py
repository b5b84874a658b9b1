"""/v1/targets: the targets live workers serve, for clients choosing one to submit to."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from service.coordinator.deps import Client, State
from service.coordinator.responses import COMMON, responses
from service.coordinator.routes.query import known_query
from service.coordinator.targets import served_with_counts

router = APIRouter(
    prefix="/v1/targets",
    tags=["targets"],
    responses=responses(*COMMON),
    dependencies=[Depends(known_query)],
)


class TargetOut(BaseModel):
    target: str = Field(description="the canonical target string (what jobs and records carry)")
    cpu: str = Field(description="the LLVM CPU name: a short form a job may name")
    display: str = Field(description="short form for people: CPU, feature count, threads")
    workers: int = Field(description="live workers in good standing serving it")


class TargetList(BaseModel):
    targets: list[TargetOut]


@router.get("", response_model=TargetList, summary="Targets live workers serve")
def list_targets(caller: Client, state: State) -> TargetList:
    """Every target a live worker serves (GET /v1/workers, which says who, is for admins)."""
    from codegen.host import parse_target

    with state.sessions.read() as session:
        served = served_with_counts(session, alive_seconds=state.settings.alive_seconds)
    out = []
    for s in served:
        parsed = parse_target(s.canonical)
        out.append(
            TargetOut(
                target=s.canonical, cpu=parsed.cpu, display=parsed.display(), workers=s.workers
            )
        )
    return TargetList(targets=out)

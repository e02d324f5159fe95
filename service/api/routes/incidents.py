"""/eval/incidents: support staff report failed answers; reviewers accept or reject them into labelled sets."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status
from starlette.concurrency import run_in_threadpool

from eval.cases import Label
from eval.incidents import CASE_PREFIX
from service.api.convert import to_params
from service.api.deps import IncidentsDep, IndexDep, PipelineDep, SettingsDep
from service.api.incident_schemas import IncidentCreated, IncidentIn, IncidentOut, IncidentPage, IncidentPatch
from service.api.schemas import SearchOptions, UtcDatetime
from service.errors import InvalidRequest
from service.incidents import IncidentReport
from service.state.incidents import Incident
from service.state.schema import iso

router = APIRouter(prefix="/eval/incidents", tags=["incidents"])
MAX_ID = 2**31 - 1  # incident ids are 32-bit integers in the store
IncidentId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.post("", response_model=IncidentCreated, status_code=status.HTTP_201_CREATED)
async def report_incident(
    body: IncidentIn, incidents: IncidentsDep, index: IndexDep, pipeline: PipelineDep, settings: SettingsDep
) -> dict[str, Any]:
    """Report a failed answer. The same question (after normalising case, width, spacing and punctuation) in the
    same set and tenant merges into the existing incident: `duplicate_of` names it and `reports` counts. The
    report is committed before the 201; the triage replays the question through the live pipeline."""
    report = IncidentReport(
        **body.model_dump(exclude={"filters"}), filters=body.filters.model_dump(mode="json", exclude_defaults=True)
    )
    base = to_params(SearchOptions(), settings, reranker_configured=pipeline.reranker is not None)
    done = await run_in_threadpool(incidents.report, report, index, pipeline, base, settings.default_k)
    out = incident_json(done.incident)
    return {**out, "duplicate_of": done.incident.id if done.merged else None, "triage_error": done.triage_error}


@router.get("", response_model=IncidentPage)
async def list_incidents(
    incidents: IncidentsDep,
    status: Annotated[str | None, Query(pattern="^(new|accepted|rejected)$")] = None,
    category: str | None = None,
    reporter: str | None = None,
    since: Annotated[
        UtcDatetime | None, Query(description="updated at or after (ISO 8601; a date is midnight UTC)")
    ] = None,
    set: str | None = None,
    tenant: str | None = None,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="page on: the previous page's next_before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """Incidents newest first, filtered, a page at a time."""
    found = await run_in_threadpool(
        incidents.records.search,
        status=status,
        category=category,
        reporter=reporter,
        since=iso(since) if since else None,
        set_name=set,
        tenant=tenant,
        before=before,
        limit=limit,
    )
    return {
        "incidents": [incident_json(i) for i in found],
        "next_before": found[-1].id if len(found) == limit else None,
    }


@router.get("/{incident_id}", response_model=IncidentOut)
async def get_incident(incident_id: IncidentId, incidents: IncidentsDep) -> dict[str, Any]:
    """One incident with every report and its history (who reported, merged, edited, accepted or rejected it)."""
    return incident_json(await run_in_threadpool(incidents.records.get, incident_id), detail=True)


@router.patch("/{incident_id}", response_model=IncidentOut)
async def review_incident(
    incident_id: int, body: IncidentPatch, incidents: IncidentsDep, index: IndexDep
) -> dict[str, Any]:
    """Accept (it becomes case `incident-<id>` of its set and counts in every later run) or reject, with a
    reason; reopen (status new); or edit the question, category, labels or filters. The reviewer is recorded."""
    changes: dict[str, Any] = body.model_dump(exclude_unset=True, exclude={"reviewer", "labels", "filters"})
    if body.labels is not None:
        try:
            changes["labels"] = [Label(**label.model_dump(exclude_none=True)) for label in body.labels]
        except ValueError as exc:
            raise InvalidRequest(f"labels: {exc}") from None
    if body.filters is not None:
        changes["filters"] = body.filters.model_dump(mode="json", exclude_defaults=True)
    updated = await run_in_threadpool(incidents.review, incident_id, body.reviewer, changes, index)
    return incident_json(updated, detail=True)


def incident_json(i: Incident, *, detail: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "incident_id": i.id,
        "set": i.set_name,
        "tenant": i.tenant,
        "question": i.question,
        "category": i.category,
        "status": i.status,
        "labels": [label.to_json() for label in i.labels],
        "filters": dict(i.filters),
        "fresh_only": i.fresh_only,
        "k": i.k,
        "reports": i.reports,
        "reporters": list(i.reporters),
        "created_at": i.created_at,
        "updated_at": i.updated_at,
        "reviewer": i.reviewer,
        "reason": i.reason,
        "reviewed_at": i.reviewed_at,
        "triage": dict(i.triage) if i.triage else None,
        "case_id": f"{CASE_PREFIX}{i.id}",
        "last_outcome": i.last_outcome,
        "last_run": i.last_run,
    }
    if detail:
        out["history"] = [
            {"at": e.at, "actor": e.actor, "action": e.action, "detail": dict(e.detail)} for e in i.events
        ]
        out["report_details"] = [
            {
                "reporter": r.reporter,
                "question": r.question,
                "label": r.label.to_json(),
                "answer": r.answer,
                "note": r.note,
                "reported_at": r.reported_at,
            }
            for r in i.reports_detail
        ]
    return out

"""/eval/incidents: support staff report failed answers; reviewers accept or reject them into labelled sets."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status
from starlette.concurrency import run_in_threadpool

from eval.incidents import CASE_PREFIX
from service.api.auth import AUTH_RESPONSES, IncidentReader, Reporter, Reviewer, audited
from service.api.deps import IncidentDeskDep, IndexDep, PipelineDep, RuntimeDep
from service.api.incident_schemas import IncidentCreated, IncidentIn, IncidentOut, IncidentPage, IncidentPatch
from service.evaluation.incidents import IncidentReport
from service.inputs import UtcDatetime
from service.state.incidents import Incident
from service.state.schema import iso

router = APIRouter(prefix="/eval/incidents", tags=["incidents"], responses=AUTH_RESPONSES)
MAX_ID = 2**31 - 1  # incident ids are 32-bit integers in the store
IncidentId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.post("", response_model=IncidentCreated, status_code=status.HTTP_201_CREATED)
async def report_incident(
    body: IncidentIn,
    desk: IncidentDeskDep,
    index: IndexDep,
    pipeline: PipelineDep,
    runtime: RuntimeDep,
    caller: Reporter,
) -> dict[str, Any]:
    """Report a failed answer. The same question (after normalising case, width, spacing and punctuation) in the
    same set and tenant merges into the existing incident: `duplicate_of` names it and `reports` counts. The
    report is committed before the 201; the triage replays the question through the live pipeline. A
    tenant-bound key reports for its own tenant."""
    filters = body.filters.model_dump(mode="json", exclude_defaults=True)
    report = IncidentReport(**body.model_dump(exclude={"filters"}), filters=filters)
    with audited(runtime, caller, "incident.report", detail={"reporter": body.reporter}):  # with the report's rows
        done = await run_in_threadpool(desk.report, caller, report, index, pipeline)
    out = incident_json(done.incident)
    return {**out, "duplicate_of": done.incident.id if done.merged else None, "triage_error": done.triage_error}


@router.get("", response_model=IncidentPage)
async def list_incidents(
    desk: IncidentDeskDep,
    caller: IncidentReader,
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
    """Incidents newest first, filtered, a page at a time; a tenant-bound key's, of its tenant only."""
    found = await run_in_threadpool(
        desk.search,
        caller,
        tenant=tenant,
        status=status,
        category=category,
        reporter=reporter,
        since=iso(since) if since else None,
        set_name=set,
        before=before,
        limit=limit,
    )
    return {
        "incidents": [incident_json(i) for i in found],
        "next_before": found[-1].id if len(found) == limit else None,
    }


@router.get("/{incident_id}", response_model=IncidentOut)
async def get_incident(incident_id: IncidentId, desk: IncidentDeskDep, caller: IncidentReader) -> dict[str, Any]:
    """One incident with every report and its history (who reported, merged, edited, accepted or rejected it)."""
    return incident_json(await run_in_threadpool(desk.get, caller, incident_id), detail=True)


@router.patch("/{incident_id}", response_model=IncidentOut)
async def review_incident(
    incident_id: IncidentId,
    body: IncidentPatch,
    desk: IncidentDeskDep,
    index: IndexDep,
    runtime: RuntimeDep,
    caller: Reviewer,
) -> dict[str, Any]:
    """Accept (it becomes case `incident-<id>` of its set and counts in every later run; a tenant's incident, in
    its tenant's runs only, until an unbound key promotes it with `scope: all`) or reject, with a reason; reopen
    (status new); or edit the question, category, labels or filters. The reviewer is recorded, and the key that
    made the change in the audit log."""
    changes: dict[str, Any] = body.model_dump(exclude_unset=True, exclude={"reviewer", "labels", "filters"})
    if body.labels is not None:
        changes["labels"] = [label.model_dump(exclude_none=True) for label in body.labels]
    if body.filters is not None:
        changes["filters"] = body.filters.model_dump(mode="json", exclude_defaults=True)
    detail = {"reviewer": body.reviewer, **{k: v for k, v in changes.items() if k in ("status", "reason", "scope")}}
    detail["changed"] = sorted(changes)
    with audited(runtime, caller, "incident.review", str(incident_id), detail):  # with the incident's change
        updated = await run_in_threadpool(desk.review, caller, incident_id, body.reviewer, changes, index)
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
        "scope": "all" if i.tenant is None or i.promoted else "tenant",
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

"""/eval/incidents: support staff report failed answers; reviewers accept or reject them into labelled sets."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status
from starlette.concurrency import run_in_threadpool

from eval.cases import Label
from eval.incidents import CASE_PREFIX
from service.access.principals import Principal, visible, write_tenant
from service.api.auth import AUTH_RESPONSES, IncidentReader, Reporter, Reviewer, audit
from service.api.convert import to_params
from service.api.deps import EvalsDep, IncidentsDep, IndexDep, PipelineDep, RuntimeDep, SettingsDep
from service.api.incident_schemas import IncidentCreated, IncidentIn, IncidentOut, IncidentPage, IncidentPatch
from service.api.schemas import SearchOptions, UtcDatetime
from service.errors import Forbidden, InvalidRequest, NotFound
from service.evaluation.incidents import IncidentReport, IncidentService
from service.state.incidents import Incident
from service.state.schema import iso

router = APIRouter(prefix="/eval/incidents", tags=["incidents"], responses=AUTH_RESPONSES)
MAX_ID = 2**31 - 1  # incident ids are 32-bit integers in the store
IncidentId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.post("", response_model=IncidentCreated, status_code=status.HTTP_201_CREATED)
async def report_incident(
    body: IncidentIn,
    incidents: IncidentsDep,
    index: IndexDep,
    pipeline: PipelineDep,
    settings: SettingsDep,
    runtime: RuntimeDep,
    evals: EvalsDep,
    caller: Reporter,
) -> dict[str, Any]:
    """Report a failed answer. The same question (after normalising case, width, spacing and punctuation) in the
    same set and tenant merges into the existing incident: `duplicate_of` names it and `reports` counts. The
    report is committed before the 201; the triage replays the question through the live pipeline. A
    tenant-bound key reports for its own tenant."""
    filters = body.filters.model_dump(mode="json", exclude_defaults=True)
    if "tenant" in filters:
        filters["tenant"] = write_tenant(caller, filters["tenant"], "filters.tenant")
    tenant = write_tenant(caller, body.tenant, "tenant")
    if caller.tenant is not None and body.set is not None and evals.sets.packaged(body.set):
        raise Forbidden(f"set: {body.set!r} ships with Plumbline; a tenant-bound key reports into another set")
    report = IncidentReport(**{**body.model_dump(exclude={"filters"}), "tenant": tenant}, filters=filters)
    base = to_params(SearchOptions(), settings, reranker_configured=pipeline.reranker is not None)
    done = await run_in_threadpool(incidents.report, report, index, pipeline, base, settings.default_k)
    detail = {"merged": done.merged, "set": done.incident.set_name, "reporter": body.reporter}
    await run_in_threadpool(audit, runtime, caller, "incident.report", str(done.incident.id), detail)
    out = incident_json(done.incident)
    return {**out, "duplicate_of": done.incident.id if done.merged else None, "triage_error": done.triage_error}


@router.get("", response_model=IncidentPage)
async def list_incidents(
    incidents: IncidentsDep,
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
    if caller.tenant is not None:
        tenant = write_tenant(caller, tenant, "tenant")
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
async def get_incident(incident_id: IncidentId, incidents: IncidentsDep, caller: IncidentReader) -> dict[str, Any]:
    """One incident with every report and its history (who reported, merged, edited, accepted or rejected it)."""
    return incident_json(await run_in_threadpool(_visible, incidents, incident_id, caller), detail=True)


@router.patch("/{incident_id}", response_model=IncidentOut)
async def review_incident(
    incident_id: IncidentId,
    body: IncidentPatch,
    incidents: IncidentsDep,
    index: IndexDep,
    runtime: RuntimeDep,
    caller: Reviewer,
) -> dict[str, Any]:
    """Accept (it becomes case `incident-<id>` of its set and counts in every later run) or reject, with a
    reason; reopen (status new); or edit the question, category, labels or filters. The reviewer is recorded,
    and the key that made the change in the audit log."""
    await run_in_threadpool(_visible, incidents, incident_id, caller)
    if body.filters is not None and body.filters.tenant is not None:
        write_tenant(caller, body.filters.tenant, "filters.tenant")
    changes: dict[str, Any] = body.model_dump(exclude_unset=True, exclude={"reviewer", "labels", "filters"})
    if body.labels is not None:
        try:
            changes["labels"] = [Label(**label.model_dump(exclude_none=True)) for label in body.labels]
        except ValueError as exc:
            raise InvalidRequest(f"labels: {exc}") from None
    if body.filters is not None:
        changes["filters"] = body.filters.model_dump(mode="json", exclude_defaults=True)
    updated = await run_in_threadpool(incidents.review, incident_id, body.reviewer, changes, index)
    detail = {"reviewer": body.reviewer, **{k: v for k, v in changes.items() if k in ("status", "reason")}}
    detail["changed"] = sorted(changes)
    await run_in_threadpool(audit, runtime, caller, "incident.review", str(incident_id), detail)
    return incident_json(updated, detail=True)


def _visible(incidents: IncidentService, incident_id: int, caller: Principal) -> Incident:
    """The incident, if the caller may see it: another tenant's reads like a missing one."""
    incident = incidents.records.get(incident_id)
    if not visible(caller, incident.tenant):
        raise NotFound(f"no incident {incident_id}")
    return incident


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

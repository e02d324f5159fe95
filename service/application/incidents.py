"""Incidents as a caller may report, read and review them: a tenant-bound key reports for its own tenant (into a set
that does not ship with Plumbline), and sees another tenant's incidents as absent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from eval.cases import Label
from service.access.principals import Principal, visible, write_tenant
from service.errors import Forbidden, InvalidRequest, NotFound
from service.evaluation.incidents import IncidentReport, IncidentService, Reported
from service.evaluation.runs import EvalService
from service.index.index import Index
from service.options import SearchOverrides
from service.retrieval.pipeline import SearchPipeline, search_params
from service.settings import Settings
from service.state.incidents import Incident


class Incidents:
    def __init__(self, incidents: IncidentService, evals: EvalService, settings: Settings) -> None:
        self.incidents = incidents
        self.evals = evals
        self.settings = settings

    def report(self, caller: Principal, r: IncidentReport, index: Index, pipeline: SearchPipeline) -> Reported:
        """Store the report in the tenant the caller may write, then triage it with the served defaults."""
        filters = dict(r.filters or {})
        if "tenant" in filters:
            filters["tenant"] = write_tenant(caller, filters["tenant"], "filters.tenant")
        tenant = write_tenant(caller, r.tenant, "tenant")
        if caller.tenant is not None and r.set is not None and self.evals.sets.packaged(r.set):
            raise Forbidden(f"set: {r.set!r} ships with Plumbline; a tenant-bound key reports into another set")
        s = self.settings
        base = search_params(s, SearchOverrides(), reranker_configured=pipeline.reranker is not None)
        return self.incidents.report(replace(r, tenant=tenant, filters=filters), index, pipeline, base, s.default_k)

    def search(self, caller: Principal, *, tenant: str | None, **conditions: Any) -> list[Incident]:
        """Incidents newest first (`IncidentRecords.search`); a tenant-bound key's, of its tenant only."""
        if caller.tenant is not None:
            tenant = write_tenant(caller, tenant, "tenant")
        return self.incidents.records.search(tenant=tenant, **conditions)

    def get(self, caller: Principal, incident_id: int) -> Incident:
        """The incident, if the caller may see it: another tenant's reads like a missing one."""
        incident = self.incidents.records.get(incident_id)
        if not visible(caller, incident.tenant):
            raise NotFound(f"no incident {incident_id}")
        return incident

    def review(
        self, caller: Principal, incident_id: int, reviewer: str, changes: Mapping[str, Any], index: Index
    ) -> Incident:
        """Apply a review's `changes` (fields as JSON: `labels` a list of label objects)."""
        self.get(caller, incident_id)
        changes = dict(changes)
        if "tenant" in changes.get("filters", {}):
            write_tenant(caller, changes["filters"]["tenant"], "filters.tenant")
        if "labels" in changes:
            try:
                changes["labels"] = [Label(**label) for label in changes["labels"]]
            except ValueError as exc:
                raise InvalidRequest(f"labels: {exc}") from None
        return self.incidents.review(incident_id, reviewer, changes, index)

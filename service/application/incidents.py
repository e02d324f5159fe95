"""Incidents as a caller may report, read and review them: a tenant-bound key reports for its own tenant (into a set
that does not ship with Plumbline), and sees another tenant's incidents as absent.

A report reveals nothing its key could not read with its own roles: a key that may not search the report's tenant
(`may_search`) gets one answer for every source it cannot report on (no such document, another tenant's, a chunk or
words not in it: `IncidentService.report(precise=False)`), and is shown triage's verdict without the rank, the hits
that came first or the source's status (`Triage.withheld`), when it reports and when it reads incidents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from eval.cases import Label
from service.access.principals import Principal, visible, write_tenant
from service.errors import Forbidden, InvalidRequest, NotFound
from service.evaluation.incidents import IncidentReport, IncidentService, Reported
from service.evaluation.runs import EvalService
from service.evaluation.triage import withhold
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
        searches = may_search(caller, tenant if tenant is not None else filters.get("tenant"))
        done = self.incidents.report(
            replace(r, tenant=tenant, filters=filters), index, pipeline, base, s.default_k, precise=searches
        )
        if searches:
            return done
        return replace(
            done,
            incident=shown(caller, done.incident),
            triage=done.triage.withheld() if done.triage is not None else None,
        )

    def search(self, caller: Principal, *, tenant: str | None, **conditions: Any) -> list[Incident]:
        """Incidents newest first (`IncidentRecords.search`); a tenant-bound key's, of its tenant only."""
        if caller.tenant is not None:
            tenant = write_tenant(caller, tenant, "tenant")
        return [shown(caller, i) for i in self.incidents.records.search(tenant=tenant, **conditions)]

    def get(self, caller: Principal, incident_id: int) -> Incident:
        """The incident, if the caller may see it: another tenant's reads like a missing one."""
        return shown(caller, self._visible(caller, incident_id))

    def _visible(self, caller: Principal, incident_id: int) -> Incident:
        incident = self.incidents.records.get(incident_id)
        if not visible(caller, incident.tenant):
            raise NotFound(f"no incident {incident_id}")
        return incident

    def review(
        self, caller: Principal, incident_id: int, reviewer: str, changes: Mapping[str, Any], index: Index
    ) -> Incident:
        """Apply a review's `changes` (fields as JSON: `labels` a list of label objects). Only an unbound key sets a
        tenant's incident's `scope`: promoting it makes it count in every tenant's gate and alert."""
        tenant = self._visible(caller, incident_id).tenant
        if "scope" in changes and caller.tenant is not None:
            raise Forbidden(
                "scope: an incident counts in every tenant's runs only when an unbound reviewer promotes it; a key "
                f"bound to tenant {caller.tenant!r} reviews it for its tenant's runs"
            )
        changes = dict(changes)
        if "tenant" in changes.get("filters", {}):
            write_tenant(caller, changes["filters"]["tenant"], "filters.tenant")
        if "labels" in changes:
            try:
                changes["labels"] = [Label(**label) for label in changes["labels"]]
            except ValueError as exc:
                raise InvalidRequest(f"labels: {exc}") from None
        reviewed = self.incidents.review(incident_id, reviewer, changes, index, precise=may_search(caller, tenant))
        return shown(caller, reviewed)


def may_search(caller: Principal, tenant: str | None) -> bool:
    """Whether the caller could read what a search of `tenant` shows (every tenant's, for None): the `search` role,
    and the tenant visible to it (a tenant-bound key's own; an unbound key's, any)."""
    return caller.has("search") and visible(caller, tenant)


def shown(caller: Principal, incident: Incident) -> Incident:
    """The incident as the caller may see it: triage's verdict alone unless it may search the incident's tenant."""
    if incident.triage is None or may_search(caller, incident.tenant):
        return incident
    return replace(incident, triage=withhold(incident.triage))

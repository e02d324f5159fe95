"""Synthetic day-0 sets: questions an LLM writes from the service's own chunks, kept only when they pass quality
control, and proposed for review.

A synthesis samples current chunks across tenants, tags and documents (`eval.synthetic.stratified_sample`, seeded),
asks the LLM for questions that only that chunk answers, in the chunk's language, drops those the rules reject
(`eval.synthetic.rule_rejections`: too short, pronoun-led, about "the document", answerable from the title, copying
the chunk), asks the LLM a second time whether the chunk really answers each survivor, and stores every draft at
once, one passage a transaction: `proposed` or `discarded` with its reasons. At the end, questions that nearly
repeat another (embedding cosine at least `dedup_threshold`) are discarded too, and with `accept_all` the rest join
the set. A synthesis that dies keeps every passage it finished; resumed (`resume`: its id), it skips them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from eval import synthetic as syn
from eval.storage import check_name
from service.errors import InvalidRequest, NotFound
from service.filters import FilterSpec, build_filter
from service.index.index import Index, StoredDocument
from service.infra.faults import crash_point
from service.retrieval.embedding import Embedder
from service.state.work import Draft, DraftRecords, NewDraft, ResultRecords

if TYPE_CHECKING:
    from service.infra.llm import ChatClient, Usage

log = logging.getLogger("plumbline")

LISTING_PAGE = 500  # documents read a page at a time to plan the sample
MAX_PASSAGES = 2000  # one synthesis samples at most this many chunks
GENERATION_TOKENS = 600
CHECK_TOKENS = 200


@dataclass(frozen=True)
class SynthesisRequest:
    """What a synthesis is asked for; stored with it, so that a resumed one does the same."""

    set_name: str
    passages: int = 50  # chunks to sample
    per_passage: int = 2  # questions asked for per chunk
    seed: int = 0
    tags: tuple[str, ...] = ()  # only chunks of documents with one of these tags; empty: every document
    tenant: str | None = None  # only this tenant's documents (a tenant-bound caller's own, always)
    check: bool = True  # the second LLM call: does the chunk answer the question?
    dedup_threshold: float = 0.92
    min_words: int = 4
    max_copy_run: int = 8
    accept_all: bool = False  # the survivors join the set at once, unreviewed (an explicit choice)

    def __post_init__(self) -> None:
        check_name(self.set_name, "set")
        if not 1 <= self.passages <= MAX_PASSAGES:
            raise InvalidRequest(f"passages must be 1..{MAX_PASSAGES}, got {self.passages}")
        if not 1 <= self.per_passage <= 5:
            raise InvalidRequest(f"per_passage must be 1..5, got {self.per_passage}")
        if not 0.5 <= self.dedup_threshold <= 1.0:
            raise InvalidRequest(f"dedup_threshold must be 0.5..1, got {self.dedup_threshold}")

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["tags"] = list(self.tags)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SynthesisRequest:
        return cls(**{**obj, "tags": tuple(obj.get("tags", ()))})


@dataclass(frozen=True)
class Outcome:
    """One passage's drafts, as stored."""

    passage: syn.Passage
    drafts: tuple[NewDraft, ...]
    language: str


class Synthesizer:
    """Plans and runs syntheses over `index`, with the LLM `llm()` makes (a new client per synthesis: its usage
    counts that synthesis alone) and `embedder` for near-duplicates.

    Example:
        >>> Synthesizer(index, embedder, drafts, results, lambda: client, "qwen2.5").plan(req)  # doctest: +SKIP
    """

    def __init__(
        self,
        index: Index,
        embedder: Embedder,
        drafts: DraftRecords,
        results: ResultRecords,
        llm: Callable[[], ChatClient],
        model: str,
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.drafts = drafts
        self.results = results
        self.llm = llm
        self.model = model

    def plan(self, req: SynthesisRequest) -> list[syn.Passage]:
        """The chunks a synthesis drafts from, without their text: current documents matching the request, sampled
        across tenants, tags and documents with the request's seed. `InvalidRequest` when none match."""
        spec = FilterSpec(tenant=req.tenant, tags=req.tags)
        where = build_filter(spec, fresh_only=True, now=dt.datetime.now(dt.UTC))
        stubs: list[syn.Passage] = []
        cursor = None
        while True:
            entries, cursor = self.index.listing(where, cursor, LISTING_PAGE)
            for e in entries:
                stubs.extend(
                    syn.Passage(f"{e.id}#{n}", e.id, "", e.title, (), e.tenant, tuple(e.tags)) for n in range(e.chunks)
                )
            if cursor is None:
                break
        if not stubs:
            scope = f"tenant {req.tenant!r}" if req.tenant else "the index"
            tags = f" with tags {list(req.tags)}" if req.tags else ""
            raise InvalidRequest(f"{scope} holds no current document{tags} to draft questions from: ingest some first")
        return syn.stratified_sample(stubs, req.passages, req.seed)

    def run(self, job_id: str, req: SynthesisRequest, progress: Callable[[int, int], None]) -> dict[str, Any]:
        """Draft from every planned passage not drafted yet under `job_id`, then discard near-duplicates (and accept
        the rest with `accept_all`); the summary stored with the result."""
        planned = self.plan(req)
        done = self.drafts.chunks_done(job_id)
        todo = [p for p in planned if p.chunk_id not in done]
        client = self.llm()
        texts = _DocumentCache(self.index)
        finished = len(planned) - len(todo)
        lock = threading.Lock()
        languages: Counter[str] = Counter()
        try:
            progress(finished, len(planned))
            with ThreadPoolExecutor(max_workers=client.config.max_concurrency) as pool:
                for outcome in pool.map(lambda p: self._draft(client, texts.passage(p), req), todo):
                    self.drafts.add(
                        req.set_name, job_id, outcome.passage.tenant, outcome.passage.chunk_id, outcome.drafts
                    )
                    crash_point("synthesis:drafted")
                    with lock:
                        finished += 1
                        languages[outcome.language] += 1
                    progress(finished, len(planned))
        finally:
            usage = client.usage()
            client.close()
        self._discard_near_duplicates(job_id, req)
        if req.accept_all:
            proposed = [d.id for d in self.drafts.of_job(job_id) if d.status == "proposed"]
            self.drafts.review(proposed, "accepted", "accept_all", "accepted with accept_all")
        return self.summary(job_id, req, planned, usage, languages)

    def _draft(self, client: ChatClient, passage: syn.Passage, req: SynthesisRequest) -> Outcome:
        """Ask for questions from one passage and judge each: rules, then the LLM's check."""
        language = syn.language_of(passage.text)
        result = client.complete_json(
            syn.generation_messages(passage, req.per_passage),
            syn.GENERATION_SCHEMA,
            name="questions",
            max_tokens=GENERATION_TOKENS,
            seed=req.seed,
        )
        if result.data is None:
            problem = "refused" if result.refusal else "malformed"
            detail = result.refusal or result.problem or "no JSON"
            failed = {"case": None, "reasons": [problem], "detail": detail[:300], "chunk_id": passage.chunk_id}
            return Outcome(passage, (NewDraft(syn.case_id_for(passage, ""), "discarded", "", failed),), language)
        drafts = []
        for draft in syn.parse_generation(result.data, passage)[: req.per_passage]:  # a model may write more
            reasons = syn.rule_rejections(
                draft.question, passage, min_words=req.min_words, max_copy_run=req.max_copy_run
            )
            record: dict[str, Any] = {
                "chunk_id": passage.chunk_id,
                "overlap": syn.copy_overlap(draft.question, passage.text),
                "evidence_verbatim": draft.verbatim,
            }
            if not reasons and req.check:
                answered, why = self._check(client, draft.question, passage, req.seed)
                record["check"] = why
                if answered is not True:
                    reasons.append("not_answered" if answered is False else "check_unreadable")
            case_id = syn.case_id_for(passage, draft.question)
            case = syn.synthetic_case(draft, passage, case_id=case_id, model=self.model)
            record.update(case=case.to_json(), reasons=reasons)
            drafts.append(NewDraft(case_id, "discarded" if reasons else "proposed", draft.question, record))
        if not drafts:
            empty = {"case": None, "reasons": ["malformed"], "detail": "no question in the reply", "chunk_id": ""}
            drafts.append(NewDraft(syn.case_id_for(passage, ""), "discarded", "", empty))
        return Outcome(passage, tuple(drafts), language)

    def _check(self, client: ChatClient, question: str, passage: syn.Passage, seed: int) -> tuple[bool | None, str]:
        result = client.complete_json(
            syn.check_messages(question, passage), syn.CHECK_SCHEMA, name="check", max_tokens=CHECK_TOKENS, seed=seed
        )
        if result.data is None:
            return None, result.refusal or result.problem or "no JSON"
        return syn.parse_check(result.data)

    def _discard_near_duplicates(self, job_id: str, req: SynthesisRequest) -> None:
        """Discard a proposed question of this synthesis that nearly repeats an earlier one of the set (accepted or
        proposed, this synthesis's or an earlier one's)."""
        held = [
            d
            for status in ("accepted", "proposed")
            for d in self.drafts.listing(req.set_name, status=status, tenant=None, limit=100_000)
        ]
        held.sort(key=lambda d: (d.job_id == job_id, d.id))  # others' first: a new question gives way to an old one
        if len(held) < 2:
            return
        vectors = np.asarray(self.embedder.embed_queries([d.question for d in held]), dtype=np.float32)
        drop = [held[i] for i in syn.near_duplicates(vectors, req.dedup_threshold)]
        self.drafts.discard([d.id for d in drop if d.job_id == job_id and d.status == "proposed"], "near_duplicate")

    def summary(
        self,
        job_id: str,
        req: SynthesisRequest,
        planned: Sequence[syn.Passage],
        usage: Usage,
        languages: Mapping[str, int],
    ) -> dict[str, Any]:
        """What a synthesis made: drafts by status, discards by reason, the copy-overlap distribution, the sample's
        spread over tenants and tags, the LLM's tokens, and who made the questions."""
        drafts = self.drafts.of_job(job_id)
        questions = [d for d in drafts if d.question]
        reasons: Counter[str] = Counter(
            r for d in drafts if d.status == "discarded" for r in d.record.get("reasons", [])
        )
        return {
            "set": req.set_name,
            "passages": len(planned),
            "drafted": len(questions),
            "by_status": dict(Counter(d.status for d in questions)),
            "discarded_by_reason": dict(sorted(reasons.items())),
            "overlap": syn.overlap_distribution([float(d.record.get("overlap", 0.0)) for d in questions]),
            "strata": dict(Counter(f"{p.tenant or '-'}/{p.tags[0] if p.tags else '-'}" for p in planned)),
            "languages": dict(languages),
            "usage": usage.to_json(),
            "generator": {"model": self.model, "prompt_version": syn.PROMPT_VERSION},
        }


class _DocumentCache:
    """Documents read once per synthesis, for their chunks' text (threads share it)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._docs: dict[str, StoredDocument] = {}
        self._lock = threading.Lock()

    def passage(self, stub: syn.Passage) -> syn.Passage:
        with self._lock:
            doc = self._docs.get(stub.doc_id)
        if doc is None:
            doc = self.index.get(stub.doc_id)
            with self._lock:
                self._docs[stub.doc_id] = doc
        chunk = next((c for c in doc.chunks if c.chunk_id == stub.chunk_id), None)
        if chunk is None:
            raise NotFound(f"chunk {stub.chunk_id} is gone (its document was re-ingested): start a new synthesis")
        return dataclasses.replace(stub, text=chunk.text, title=chunk.title, heading_path=chunk.heading_path)


def proposals(drafts: Sequence[Draft]) -> Iterator[dict[str, Any]]:
    """Drafts as the review page and `GET /eval/sets/{name}/proposals` show them."""
    for d in drafts:
        yield {
            "id": d.id,
            "case_id": d.case_id,
            "status": d.status,
            "question": d.question,
            "chunk_id": d.chunk_id,
            "tenant": d.tenant,
            "job_id": d.job_id,
            "case": d.record.get("case"),
            "reasons": d.record.get("reasons", []),
            "overlap": d.record.get("overlap"),
            "check": d.record.get("check"),
            "detail": d.record.get("detail"),
            "created_at": d.created_at,
            "reviewer": d.reviewer,
            "reason": d.reason,
        }

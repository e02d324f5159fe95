"""Answer grading: question / answer / context triples judged by an LLM on faithfulness, correctness and
completeness, several samples per item (judges are noisy: the median and the spread are kept).

Items without contexts take them from a stored run: the chunks that run retrieved for the case of the same id (its
top `k`, their full text read from the index; a chunk gone since falls back to the run's snippet). The reference
an answer's correctness is judged against is the case's evidence, when the set has that case. The grades are a
result of their own kind: they never decide the retrieval gate, and the report says to fix retrieval first when the
set's latest recall@10 is below the threshold.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from eval import judge as jd
from eval.cases import Case
from eval.errors import UnknownName
from eval.runner import Run
from eval.storage import RunStore, check_name
from service.errors import InvalidRequest, NotFound, StoreUnavailable
from service.index.index import Index
from service.state import StateStore

if TYPE_CHECKING:
    from service.infra.llm import ChatClient

log = logging.getLogger("plumbline")

JUDGE_TOKENS = 400
MAX_ITEMS = 2000
MAX_SAMPLES = 9


@dataclass(frozen=True)
class AnswersRequest:
    """What to grade: the items, the set they belong to (its cases give the references; its retrieval metrics are
    shown beside the grades), a run whose retrieved chunks are the contexts of items that bring none, how many of
    them (`k`), and how many judge samples per item."""

    set_name: str
    items: tuple[jd.AnswerItem, ...]
    run_id: str | None = None
    k: int = 5
    samples: int = 3
    tenant: str | None = None

    def __post_init__(self) -> None:
        check_name(self.set_name, "set")
        if not self.items:
            raise InvalidRequest("no items to grade: send JSON Lines of {id, question, answer, contexts}")
        if len(self.items) > MAX_ITEMS:
            raise InvalidRequest(f"at most {MAX_ITEMS} items per grading, got {len(self.items)}: split them")
        if not 1 <= self.samples <= MAX_SAMPLES:
            raise InvalidRequest(f"samples must be 1..{MAX_SAMPLES}, got {self.samples}")
        if not 1 <= self.k <= 50:
            raise InvalidRequest(f"k must be 1..50, got {self.k}")
        if self.run_id is None and any(not item.contexts for item in self.items):
            missing = [item.id for item in self.items if not item.contexts][:5]
            raise InvalidRequest(
                f"items {missing} bring no contexts: give each its contexts, or a run_id whose retrieved chunks are "
                "their contexts (an item's id naming the run's case)"
            )


class Grader:
    """Grades answers with the judge `llm()` makes (a new client per grading: its usage counts that grading)."""

    def __init__(self, index: Index, runs: RunStore, llm: Callable[[], ChatClient], model: str) -> None:
        self.index = index
        self.runs = runs
        self.llm = llm
        self.model = model

    def prepare(self, req: AnswersRequest, cases: Sequence[Case]) -> tuple[jd.AnswerItem, ...]:
        """The items with their contexts (from the run where they bring none) and references (the set's evidence)."""
        run = self._run(req) if req.run_id is not None else None
        by_id = {c.id: c for c in cases}
        retrieved = {c.case_id: c for c in run.cases} if run is not None else {}
        out = []
        for item in req.items:
            contexts = item.contexts
            if not contexts:
                found = retrieved.get(item.id)
                if found is None:
                    raise InvalidRequest(
                        f"item {item.id!r} brings no contexts and run {req.run_id} has no case {item.id!r}"
                    )
                contexts = tuple(self._text(r.chunk_id, r.text) for r in found.retrieved[: req.k])
            reference = item.reference
            case = by_id.get(item.id)
            if not reference and case is not None:
                reference = tuple(label.evidence for label in case.positive if label.evidence)
            out.append(dataclasses.replace(item, contexts=contexts, reference=reference))
        return tuple(out)

    def _run(self, req: AnswersRequest) -> Run:
        try:
            run = self.runs.get(req.run_id or "")
        except UnknownName:
            raise NotFound(f"no run with id {req.run_id!r}") from None
        if req.tenant is not None and run.tenant != req.tenant:
            raise NotFound(f"no run with id {req.run_id!r}")
        return run

    def _text(self, chunk_id: str, snippet: str) -> str:
        doc_id = chunk_id.rpartition("#")[0] or chunk_id
        try:
            chunks = self.index.get(doc_id).chunks
        except NotFound:
            return snippet
        return next((c.text for c in chunks if c.chunk_id == chunk_id), snippet)

    def grade(
        self, items: Sequence[jd.AnswerItem], samples: int, progress: Callable[[int, int], None]
    ) -> tuple[list[jd.ItemGrade], dict[str, Any]]:
        """Every item judged `samples` times (distinct seeds), aggregated; the grades and the judge's token usage."""
        client = self.llm()
        done = 0
        grades: list[jd.ItemGrade] = []
        try:
            progress(0, len(items))
            with ThreadPoolExecutor(max_workers=client.config.max_concurrency) as pool:
                for grade in pool.map(lambda item: self._judge(client, item, samples), items):
                    grades.append(grade)
                    done += 1
                    progress(done, len(items))
        finally:
            usage = client.usage()
            client.close()
        return grades, usage.to_json()

    def _judge(self, client: ChatClient, item: jd.AnswerItem, samples: int) -> jd.ItemGrade:
        judgements = []
        for seed in range(samples):
            result = client.complete_json(
                jd.judge_messages(item),
                jd.JUDGE_SCHEMA,
                name="grades",
                max_tokens=JUDGE_TOKENS,
                temperature=0.0 if samples == 1 else 0.7,
                seed=seed,
            )
            judgements.append(jd.parse_judgement(result.data) if result.data is not None else None)
        return jd.aggregate(judgements, item_id=item.id, category=item.category)


def latest_recall(runs: RunStore, set_name: str, tenant: str | None) -> tuple[float | None, str | None]:
    """The set's latest run of the served configuration (monitoring or manual) with recall@10: the value and the
    run's id; (None, None) if it has none."""
    for summary in runs.summaries(50, 0, set_name, None, tenant):
        if summary.kind != "experiment" and "recall@10" in summary.metrics:
            return summary.metrics["recall@10"], summary.run_id
    return None, None


def summary_of(report: Mapping[str, Any]) -> dict[str, Any]:
    """What a listing of answer gradings shows."""
    keys = ("set_name", "judge_model", "prompt_version", "samples_per_item", "overall", "spread", "graded", "ungraded")
    return {**{k: report[k] for k in keys if k in report}, "retrieval": report.get("retrieval")}


class AnswerGaugeCollector(Collector):
    """`plumbline_answer_grade{set,criterion}` and its spread, from each set's latest answer grading over every
    tenant, read from the state store at scrape time: separate from the retrieval gauges, never part of a gate (an
    alert on them is a judgement of the generator, which a judge makes noisily). A store that does not answer gives
    no answer gauges for that scrape rather than a failed scrape."""

    def __init__(self, state: Callable[[], StateStore | None]) -> None:
        self._state = state  # None until the store is open

    def collect(self) -> Iterator[GaugeMetricFamily]:
        grade = GaugeMetricFamily(
            "plumbline_answer_grade",
            "Latest answer grading of a set: the mean over items of the judge's median score (0..1) per criterion.",
            labels=["set", "criterion"],
        )
        spread = GaugeMetricFamily(
            "plumbline_answer_grade_spread",
            "The judge's mean spread (max - min over samples) per criterion in that grading: its noise.",
            labels=["set", "criterion"],
        )
        items = GaugeMetricFamily(
            "plumbline_answer_items",
            "Items in that grading, graded or not (no readable sample).",
            labels=["set", "state"],
        )
        state = self._state()
        latest: dict[str, Mapping[str, Any]] = {}
        if state is not None:
            try:
                listed = state.results.listing("answers", set_name=None, tenant=None, limit=500)
            except StoreUnavailable as exc:
                log.warning("answer gauges: the state store did not answer: %s", exc)
                listed = []
            for r in listed:  # newest first: the first finished grading over every tenant of each set
                if r.summary is not None and r.tenant is None:
                    latest.setdefault(r.set_name, r.summary)
        for set_name, summary in sorted(latest.items()):
            for criterion, value in sorted(summary.get("overall", {}).items()):
                grade.add_metric([set_name, criterion], value)
            for criterion, value in sorted(summary.get("spread", {}).items()):
                spread.add_metric([set_name, criterion], value)
            items.add_metric([set_name, "graded"], summary.get("graded", 0))
            items.add_metric([set_name, "ungraded"], summary.get("ungraded", 0))
        yield from (grade, spread, items)

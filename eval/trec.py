"""Interchange with the IR world: BEIR and TREC qrels in, TREC runs out.

Export a run in TREC format and trec_eval, pytrec_eval or ranx can check any number we print:
`trec_eval -m ndcg_cut.10 qrels.tsv run.trec`. The score column is `n - rank + 1` (strictly
decreasing), so trec_eval's own tie-breaking (by document id) cannot reorder our ranking.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.matching import collapse_to_documents
from eval.runner import Run

Qrels = dict[str, dict[str, int]]


def read_qrels(path: Path) -> Qrels:
    """BEIR `query-id corpus-id score` TSV (with header) or TREC `qid iter docno rel` lines."""
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            parts = line.split()
            if not parts or (n == 1 and parts[:2] == ["query-id", "corpus-id"]):
                continue  # blank, or the BEIR header
            if len(parts) == 3:
                qid, doc, rel = parts
            elif len(parts) == 4:
                qid, _, doc, rel = parts
            else:
                raise EvalError(f"{path}:{n}: expected 3 (BEIR) or 4 (TREC) columns, got {len(parts)}")
            try:
                qrels.setdefault(qid, {})[doc] = int(rel)
            except ValueError:
                raise EvalError(f"{path}:{n}: relevance {rel!r} is not an integer") from None
    return qrels


def read_queries(path: Path) -> dict[str, str]:
    """BEIR `queries.jsonl` (`_id`, `text`) or a TSV of `qid<TAB>text`."""
    out: dict[str, str] = {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                if path.suffix == ".jsonl":
                    row = json.loads(line)
                    out[str(row["_id"])] = row["text"]
                else:
                    qid, text = line.rstrip("\n").split("\t", 1)
                    out[qid] = text
            except (ValueError, KeyError) as exc:
                raise EvalError(f"{path}:{n}: not a query line: {exc}") from None
    return out


def cases_from_qrels(
    qrels: Mapping[str, Mapping[str, int]], queries: Mapping[str, str], category: str = "uncategorized"
) -> list[Case]:
    """One case per judged query with at least one positive judgement; document labels, grades kept."""
    cases = []
    for qid in sorted(qrels, key=lambda q: (len(q), q)):
        judged = qrels[qid]
        if qid not in queries:
            raise EvalError(f"query {qid!r} is judged in the qrels but missing from the queries file")
        if not any(g > 0 for g in judged.values()):
            continue
        # trec_eval reads negative grades as judged non-relevant: so do we (grade 0)
        labels = tuple(Label(doc_id=doc, grade=max(0, g)) for doc, g in sorted(judged.items()))
        cases.append(Case(id=qid, question=queries[qid], relevant=labels, category=category, source="qrels"))
    return cases


def trec_run_lines(run: Run, tag: str = "plumbline") -> Iterable[str]:
    """`qid Q0 docno rank score tag` lines; docno is the document id (unit doc) or the chunk id."""
    for case in run.cases:
        ranked = collapse_to_documents(case.retrieved) if run.unit == "doc" else list(case.retrieved)
        for rank, r in enumerate(ranked, start=1):
            docno = r.doc_id if run.unit == "doc" else r.chunk_id
            yield f"{case.case_id} Q0 {docno} {rank} {len(ranked) - rank + 1} {tag}"

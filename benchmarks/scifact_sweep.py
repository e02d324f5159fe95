"""SciFact as a labelled set for `plumbline eval sweep`: BEIR's train queries marked `"split": "tune"`, its test
queries `"split": "test"`, so a sweep chooses on train and reports on test (docs/sweeps.md).

    python benchmarks/scifact_sweep.py /tmp/scifact.jsonl   # writes the set (809 train + 300 test queries)

Then, with the corpus ingested once (`plumbline ingest ../shared/datasets/scifact/corpus.jsonl --data-dir D`):

    plumbline eval sweep --data-dir D --set /tmp/scifact.jsonl --unit doc --metric ndcg@10 --space '{...}'

Document labels with BEIR's grades (`eval.trec.cases_from_qrels`), judged at unit `doc`, as BEIR scores SciFact.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.datasets import SCIFACT, require
from eval.cases import Case, dump_jsonl
from eval.trec import cases_from_qrels, read_qrels, read_queries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the .jsonl to write; its stem is the set's name (e.g. scifact.jsonl)")
    args = p.parse_args()
    require(SCIFACT)
    queries = read_queries(SCIFACT / "queries.jsonl")
    cases: list[Case] = []
    for split, qrels in (("tune", "train.tsv"), ("test", "test.tsv")):
        judged = cases_from_qrels(read_qrels(SCIFACT / "qrels" / qrels), queries, category=f"scifact-{split}")
        cases.extend(replace(c, split=split, source="scifact") for c in judged)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        sys.exit("a query id is judged in both the train and the test qrels: the splits would overlap")
    args.out.write_text(dump_jsonl(cases), encoding="utf-8")
    tune = sum(c.split == "tune" for c in cases)
    print(f"{args.out}: {len(cases)} cases, tune {tune} (BEIR train), test {len(cases) - tune} (BEIR test)")


if __name__ == "__main__":
    main()

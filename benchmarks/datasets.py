"""Where the benchmarks find the public collections (`PLUMBLINE_DATASETS`, else `../shared/datasets` beside the
checkout, as the tests look for them in `tests/eval/conftest.py`), and SciFact's corpus chunked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from service.domain import Chunk, Document
from service.index.chunking import Chunker, ChunkerConfig
from service.index.loaders import iter_documents

DATASETS = Path(os.environ.get("PLUMBLINE_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
SCIFACT = DATASETS / "scifact"
CMRC = DATASETS / "cmrc2018-zh"


def require(*roots: Path) -> None:
    """End the script with a message naming each collection that is missing and where it was looked for (a run would
    otherwise fail with a traceback, maybe after minutes of work)."""
    missing = [root for root in roots if not (root / "corpus.jsonl").is_file()]
    if missing:
        where = "; ".join(f"{root.name} at {root}" for root in missing)
        sys.exit(
            f"this benchmark needs public collections that are not there: {where}. They are BEIR's SciFact and the "
            "CMRC 2018 set in BEIR's layout (corpus.jsonl, queries.jsonl, qrels/; docs/performance.md, Datasets): "
            "put them there, or set PLUMBLINE_DATASETS to the folder that holds them."
        )


def scifact_chunks(size: int) -> list[tuple[Document, Chunk]]:
    """SciFact's corpus chunked at `size` characters (a tenth of it overlapping)."""
    chunker = Chunker(ChunkerConfig(size, size // 10))
    return [(d, c) for d in iter_documents(SCIFACT / "corpus.jsonl") for c in chunker.chunk(d)]

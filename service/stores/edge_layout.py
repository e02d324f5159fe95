"""How the embedded store lays out its shard: the engine configuration `service.stores.edge.EdgeStore` creates a
shard with, the one it switches to past `PLUMBLINE_INDEX_GRAPH_FROM` points, and the parameters of every dense query.

Up to the threshold dense search is brute force over int8 scalar-quantised copies of the vectors, with the top
`2 x limit` rescored on the float32 originals: at 100k chunks a scan took 4.3 ms instead of 10.0, and on SciFact's
real embeddings the top 100 are the exact top 100 (`benchmarks/speed.py` measures both). A scan grows with the
collection; past the threshold every segment gets an HNSW graph (m=16, traversed on the int8 copies, the same
rescoring), whose cost grows with the number of segments rather than of points (`benchmarks/speed.py --million`,
`benchmarks/hnsw.py`). Writes land in an appendable float32 segment; `optimize()` turns a segment past
`QUANTISE_AFTER_KB` into a quantised one (with a graph, once switched) of at most `SEGMENT_KB`.
"""

from __future__ import annotations

from typing import Any

import qdrant_edge as qe

from service.stores.base import DENSE, SPARSE, FieldType

SCHEMA = {
    FieldType.KEYWORD: qe.PayloadSchemaType.Keyword,
    FieldType.INTEGER: qe.PayloadSchemaType.Integer,
    FieldType.DATETIME: qe.PayloadSchemaType.Datetime,
}
QUANTISE_AFTER_KB = 5_000  # about 3,300 vectors of 384 dimensions; below it a segment is scanned in float32
# Segments are capped at about 13,000 vectors: uncapped, every conversion merged into one big segment and rewrote
# it, and the engine serves no search while it optimises (docs/performance.md, Figures moved out of code comments).
SEGMENT_KB = 20_000
SCAN = qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10**9)  # no graph: every segment scanned
# a segment below full_scan_threshold KB (about 6,600 vectors), and a filter that leaves fewer points, is scanned
GRAPH = qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10_000)
# the default of PLUMBLINE_INDEX_GRAPH_FROM (service.settings), here so that an engine process need not import the
# settings (pydantic is most of its start-up); why 300,000 points: docs/decisions.md
GRAPH_FROM = 300_000
# every dense query: int8 (scan or graph), the top 2x rescored on float32 (benchmarks/speed.py measures both against a
# float32 scan); hnsw_ef is the graph's beam width, unused by a scan
DENSE_SEARCH_PARAMS = qe.SearchParams(
    hnsw_ef=128, quantization=qe.QuantizationSearchParams(rescore=True, oversampling=2.0)
)


def vectors(dimension: int) -> dict[str, Any]:
    """The shard's vectors: the dense embedding and BM25's sparse vector, weighted by the engine's IDF."""
    return {
        "vectors": {DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        "sparse_vectors": {SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    }


def new_shard(dimension: int) -> Any:
    """A new shard's configuration: scanned until it grows past the graph threshold."""
    return qe.EdgeConfig(
        **vectors(dimension),
        # payload kept in memory: with the default (cold, read from disk per point) every filtered search and candidate
        # fetch reads the disk
        payload_memory=qe.Memory.Cached,
        hnsw_config=SCAN,
        quantization_config=qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, memory=qe.Memory.Pinned),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=QUANTISE_AFTER_KB, max_segment_size=SEGMENT_KB),
    )


def with_graphs(dimension: int) -> Any:
    """What a shard is reopened with past the threshold (the engine wants its vectors named again)."""
    return qe.EdgeConfig(**vectors(dimension), hnsw_config=GRAPH)

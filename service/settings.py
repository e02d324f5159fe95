"""The one Settings object. Values come from arguments, then `PLUMBLINE_*` environment variables.

Nothing here is built at import time: `create_app(Settings(...))` and the CLI construct it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.domain import FusionMethod, Mode
from service.stores.edge_layout import GRAPH_FROM

PACKAGED_MODEL = "packaged:all-MiniLM-L6-v2"


class Settings(BaseSettings):
    """Service configuration.

    Example:
        >>> Settings(data_dir=Path("/tmp/plumbline"), chunk_size=600).chunk_overlap
        100
    """

    model_config = SettingsConfigDict(env_prefix="PLUMBLINE_", extra="forbid")

    # storage
    backend: Literal["edge", "qdrant"] = "edge"
    data_dir: Path = Path("data")
    index_copies: int = Field(
        2,
        ge=1,
        le=2,
        description="the embedded index: 2 keeps two copies, each in an engine process, so that a search never waits "
        "for a write (twice the memory and disk); 1 keeps one in the serving process, where searches wait out "
        "the engine's segment work (1-2 s) during an ingest",
    )
    index_graph_from: int = Field(
        GRAPH_FROM,
        ge=0,
        description="the embedded index: past this many points (chunks, plus a record and a head per document) a "
        "write rebuilds each copy's segments with HNSW graphs (m=16, int8, rescored), one-way; below it the dense "
        "side is an int8 scan, exact in its top 100 (README, Speed: why 300,000)",
    )
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    collection: str = "plumbline"
    # the Qdrant server backend: how requests behave, and how the collection is created (only when it does not exist)
    qdrant_timeout: float = Field(5.0, gt=0, le=300, description="seconds one request may wait for an answer")
    qdrant_connect_timeout: float = Field(2.0, gt=0, le=60, description="seconds to open a connection")
    qdrant_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="retries of a request that failed transiently (no connection, timeout, 429, 502-504), with "
        "exponential backoff from 0.1 s; past them the request answers 503",
    )
    qdrant_shards: int = Field(1, ge=1, le=1000, description="shard_number of the collection")
    qdrant_replication_factor: int = Field(1, ge=1, le=100, description="copies of each shard")
    qdrant_write_consistency: int = Field(1, ge=1, le=100, description="replicas that must confirm a write")
    qdrant_on_disk: bool = Field(False, description="keep the original vectors and the payload on disk (large corpora)")
    qdrant_quantization: Literal["int8", "none"] = Field(
        "int8", description="int8 scalar quantisation of the dense vectors (kept in RAM), rescored on the originals"
    )
    qdrant_hnsw_m: int = Field(16, ge=0, le=128, description="HNSW edges per node (0: no graph, exact scan)")
    qdrant_hnsw_ef_construct: int = Field(100, ge=4, le=4096, description="HNSW build-time beam width")
    qdrant_hnsw_ef: int = Field(128, ge=1, le=4096, description="HNSW search-time beam width")
    qdrant_rescore: bool = Field(True, description="rescore quantised candidates on the original vectors")

    # models
    embedding_model: str = PACKAGED_MODEL
    embedding_batch_size: int = Field(32, ge=1, le=1024)
    query_prefix: str = ""
    document_prefix: str = ""
    rerank_model: str | None = None
    rerank_max_tokens: int = Field(
        128,
        ge=16,
        le=1024,
        description="the most tokens of a (query, passage) pair the cross-encoder reads: its cost grows with them",
    )
    rerank_focus: bool = Field(
        True,
        description="cut a passage too long for rerank_max_tokens around the query's terms, its title and heading path "
        "kept; false: cut at its end",
    )
    rerank_concurrency: int = Field(1, ge=1, le=16)
    rerank_int8: bool = Field(
        False,
        description="on ONNX Runtime, the cross-encoder's weights quantised to int8: about 2x faster, scores move",
    )
    torch_threads: int | None = Field(None, ge=1)
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the models run: cuda embeds and reranks on a GPU (torch), auto uses one if present"
    )
    encoder_runtime: Literal["onnx", "torch"] = Field(
        "onnx", description="on CPU: ONNX Runtime (exported from the model on first use) or torch"
    )
    ingest_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU priority (nice) of embedding documents, on ONNX Runtime in a session of its own: searches "
        "get the cores first while an ingest runs; 0 embeds documents like queries, in one shared session",
    )
    embedding_cache: bool = Field(True, description="keep document embeddings: unchanged chunks are not re-embedded")
    embedding_cache_path: Path | None = Field(None, description="its SQLite file; default <data_dir>/embeddings.db")
    embedding_seed: Path | None = Field(None, description="a .npz of vectors added to the cache at start (the demo's)")
    model_cache: Path | None = Field(None, description="where exported ONNX models are kept; default <data_dir>/models")

    # analysis and chunking
    chunk_size: int = Field(1000, ge=100, le=20_000, description="target chunk length in characters")
    chunk_overlap: int = Field(100, ge=0)
    stemmer: str | None = "english"
    stopwords: str = "lucene"
    bm25_k1: float = Field(0.9, gt=0)
    bm25_b: float = Field(0.4, ge=0, le=1)
    bm25_avg_len: float | None = Field(
        None, gt=0, description="mean chunk length in terms; None: measured on the first ingested batch"
    )

    # search defaults and limits
    default_k: int = Field(10, ge=1)
    default_mode: Mode = Mode.HYBRID
    default_fusion: FusionMethod = FusionMethod.WEIGHTED
    default_alpha: float = Field(0.5, ge=0, le=1)
    default_rrf_k: int = Field(60, ge=1)
    default_candidates: int = Field(100, ge=1)
    default_rerank_depth: int = Field(20, ge=1)
    default_rerank: bool = Field(True, description="rerank when a cross-encoder is configured and not asked otherwise")
    max_k: int = Field(100, ge=1)
    max_candidates: int = Field(1000, ge=1)
    max_rerank_depth: int = Field(50, ge=1)
    max_query_chars: int = Field(2000, ge=1)

    # ingestion limits
    max_batch_documents: int = Field(500, ge=1)
    max_document_chars: int = Field(2_000_000, ge=1)
    max_request_bytes: int = Field(64 * 1024 * 1024, ge=1024)

    min_free_disk_mb: int = Field(
        256,
        ge=0,
        description="writes are refused with 507 when they would leave less free space on the data directory's "
        "disk: the engine writes through memory maps, and running out of disk there kills the process",
    )
    repair_on_start: bool = Field(
        True, description="remove crash leftovers and correct supersession statuses at start (see plumbline doctor)"
    )

    # overload
    max_concurrent_evals: int = Field(2, ge=1, description="eval runs at once; more get 429 with Retry-After")
    eval_timeout_seconds: float = Field(600, gt=0, description="an eval run stops with 504 past this")
    search_timeout_seconds: float = Field(30, gt=0, description="a search answers 504 past this")

    # state store and incidents
    state_url: str | None = Field(
        None,
        description="where incidents, writable sets, runs and baselines live: a SQLAlchemy URL such as "
        "postgresql://user:pass@host/db (replicas share it); default SQLite at DATA_DIR/state.db",
    )
    incident_set: str = Field("incidents", description="the labelled set a report names no set joins")
    incidents_count_new: bool = Field(
        False, description="also evaluate incidents not yet reviewed (accepted ones always count, rejected never)"
    )
    fail_on_regressed_incidents: bool = Field(
        True, description="a gated run fails when an accepted incident that passed before fails now"
    )

    # monitoring
    eval_schedule: dict[str, float] = Field(
        default_factory=dict,
        description='labelled set -> seconds between its monitoring runs, e.g. {"handbook": 3600} (JSON in '
        "PLUMBLINE_EVAL_SCHEDULE); one replica at a time runs each, gated against the baseline named like the set",
    )

    # access
    auth: Literal["on", "off"] = Field(
        "on",
        description="on: every endpoint but /health/* needs an API key with the right role; off: anyone may do "
        "anything (the local demo only: every response then carries X-Plumbline-Auth: off)",
    )
    api_keys_file: Path | None = Field(
        None, description="a JSON list of hashed keys (plumbline keys create --secrets-file), besides the state store"
    )
    metrics_auth: bool = Field(False, description="GET /metrics needs a key with the metrics role")
    cors_origins: list[str] = Field(
        default_factory=list,
        description='origins a browser may call from (JSON in PLUMBLINE_CORS_ORIGINS, e.g. ["https://app.example"]); '
        "empty: no cross-origin access",
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per line (for log collectors); text: for a terminal"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size // 2:
            raise ValueError("chunk_overlap must be under half of chunk_size")
        if self.backend == "qdrant" and not self.qdrant_url:
            raise ValueError("backend 'qdrant' needs qdrant_url (PLUMBLINE_QDRANT_URL)")
        if self.qdrant_write_consistency > self.qdrant_replication_factor:
            raise ValueError("qdrant_write_consistency cannot exceed qdrant_replication_factor")
        if any(seconds < 1 for seconds in self.eval_schedule.values()):
            raise ValueError("eval_schedule intervals are seconds, at least 1")
        if (
            self.default_k > self.max_k
            or self.default_candidates > self.max_candidates
            or self.default_rerank_depth > self.max_rerank_depth
        ):
            raise ValueError("default_k, default_candidates and default_rerank_depth must not exceed their max_")
        return self

    @property
    def state_store_url(self) -> str:
        return self.state_url or f"sqlite:///{self.data_dir / 'state.db'}"

    @property
    def legacy_eval_dir(self) -> Path:
        """Where the file layout before the state store kept sets, runs and baselines (imported once)."""
        return self.data_dir / "eval"

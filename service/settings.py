"""The one Settings object. Values come from arguments, then `PLUMBLINE_*` environment variables.

Nothing here is built at import time: `create_app(Settings(...))` and the CLI construct it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from limits import parse_many
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.domain import FusionMethod, Mode
from service.stores.edge_layout import GRAPH_FROM

PACKAGED_MODEL = "packaged:all-MiniLM-L6-v2"
# The most documents one ingest request may carry whatever `max_batch_documents` says: `IngestRequest` checks it
# before building a model of each document (a 64 MB body holds millions of tiny ones).
MAX_BATCH_DOCUMENTS = 10_000


class Settings(BaseSettings):
    """Service configuration.

    Example:
        >>> Settings(data_dir=Path("/tmp/plumbline"), chunk_size=600).chunk_overlap
        100
    """

    model_config = SettingsConfigDict(env_prefix="PLUMBLINE_", extra="forbid")

    # storage
    backend: Literal["edge", "qdrant"] = Field(
        "edge",
        description="where the index lives: edge, the embedded engine in the data directory (one machine); qdrant, "
        "a Qdrant server or cluster at qdrant_url (several replicas can share it)",
    )
    data_dir: Path = Field(
        Path("data"),
        description="the data directory: the embedded index, the SQLite state store, the embedding cache, the "
        "exported models and the lock (plumbline.lock) that keeps a second process out",
    )
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
        "side is an int8 scan, exact in its top 100 (docs/decisions.md: why 300,000)",
    )
    qdrant_url: str | None = Field(
        None, description="the Qdrant server's URL, e.g. http://qdrant:6333 (backend qdrant)"
    )
    qdrant_api_key: str | None = Field(None, description="the Qdrant server's API key, when it asks for one")
    collection: str = Field("plumbline", description="the Qdrant collection's name (backend qdrant)")
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
    embedding_model: str = Field(
        PACKAGED_MODEL,
        description="the embedding model: packaged:all-MiniLM-L6-v2 (shipped inside a wheel), or a "
        "sentence-transformers model folder or name; an index built with another model refuses to open",
    )
    embedding_batch_size: int = Field(32, ge=1, le=1024, description="texts embedded in one call of the model")
    query_prefix: str = Field(
        "", description="text put before every query before it is embedded (for a model trained with one)"
    )
    document_prefix: str = Field(
        "", description="text put before every chunk before it is embedded; part of the embedding cache's key"
    )
    rerank_model: str | None = Field(
        None, description="a cross-encoder (a sentence-transformers model folder or name); unset: no rerank"
    )
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
    rerank_concurrency: int = Field(1, ge=1, le=16, description="reranks run at once; the others wait their turn")
    rerank_int8: bool = Field(
        False,
        description="on ONNX Runtime, the cross-encoder's weights quantised to int8: about 2x faster, scores move",
    )
    torch_threads: int | None = Field(
        None, ge=1, description="threads the models use (torch and ONNX Runtime); unset: one per core"
    )
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
    chunk_overlap: int = Field(
        100,
        ge=0,
        description="characters of the previous chunk repeated at a chunk's start (whole sentences or items); under "
        "half of chunk_size",
    )
    stemmer: str | None = Field(
        "english",
        description="the keyword analysis's Snowball stemmer (a PyStemmer algorithm name); None: no stemming; "
        "an index built with another refuses to open",
    )
    stopwords: str = Field(
        "lucene",
        description="the words the keyword analysis drops: lucene (Lucene's 33 English stopwords) or none; an index "
        "built with another set refuses to open",
    )
    bm25_k1: float = Field(0.9, gt=0, description="BM25 term-frequency saturation; fixed in the index manifest")
    bm25_b: float = Field(
        0.4, ge=0, le=1, description="BM25 length normalisation (0: none, 1: full); fixed in the index manifest"
    )
    bm25_avg_len: float | None = Field(
        None, gt=0, description="mean chunk length in terms; None: measured on the first ingested batch"
    )

    # search defaults and limits
    default_k: int = Field(
        10, ge=1, description="results a search returns when it names no k; an incident's k when it names none"
    )
    default_mode: Mode = Field(Mode.HYBRID, description="the retrieval mode of a search that names none")
    default_fusion: FusionMethod = Field(
        FusionMethod.WEIGHTED,
        description="how hybrid search fuses its two lists: weighted (z-scored scores, the union rescored on both "
        "sides) or rrf (reciprocal rank fusion)",
    )
    default_alpha: float = Field(
        0.5, ge=0, le=1, description="weight of the dense side in weighted fusion (0: keyword only, 1: dense only)"
    )
    keyword_drop_filler: bool = Field(
        True,
        description="drop the words of a question that name no topic (how, many, do, I, need, can...) from the "
        "keyword query; the dense side and the index are unchanged",
    )
    default_rrf_k: int = Field(60, ge=1, description="the k of reciprocal rank fusion, 1 / (k + rank)")
    default_candidates: int = Field(100, ge=1, description="candidates each side (dense, keyword) retrieves")
    default_rerank_depth: int = Field(20, ge=1, description="top fused results the cross-encoder reorders")
    default_rerank: bool = Field(True, description="rerank when a cross-encoder is configured and not asked otherwise")
    max_k: int = Field(100, ge=1, description="the largest k a request may ask for (422 beyond)")
    max_candidates: int = Field(1000, ge=1, description="the most candidates a request may ask for (422 beyond)")
    max_rerank_depth: int = Field(50, ge=1, description="the deepest rerank a request may ask for (422 beyond)")
    max_query_chars: int = Field(2000, ge=1, description="the longest query, in characters (422 beyond)")

    # ingestion limits
    max_batch_documents: int = Field(
        500, ge=1, le=MAX_BATCH_DOCUMENTS, description="documents in one ingest batch at most (413 beyond)"
    )
    max_document_chars: int = Field(
        2_000_000, ge=1, description="the longest document text, in characters (422 beyond)"
    )
    tenant_max_documents: int = Field(
        100_000,
        ge=0,
        description="documents one tenant may hold (a per-tenant storage cap): an ingest that would add more new ones "
        "is refused 507 naming it; 0: no cap. Documents of no tenant are not capped",
    )
    tenant_max_incident_reports: int = Field(
        10_000,
        ge=0,
        description="incident reports stored for one tenant, duplicates included (a per-tenant storage cap): past it "
        "507; 0: no cap",
    )
    tenant_max_runs: int = Field(
        10_000,
        ge=0,
        description="eval runs stored for one tenant (runs confined to it; a per-tenant storage cap): past it a run is "
        "refused 507 before it starts; 0: no cap",
    )
    max_request_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="the largest request body, in bytes (ingest batches, labelled sets): 413 beyond, from "
        "Content-Length before the body is read, or as soon as a chunked body passes it",
    )
    max_search_request_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="the largest POST /search body, in bytes (a query of max_query_chars, filters of at most 64 KB "
        "of metadata and lists of ids fit in far less): 413 beyond; max_request_bytes caps it",
    )
    max_incident_request_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="the largest body of an incident report (POST /eval/incidents) or review (PATCH "
        "/eval/incidents/{id}), in bytes (a few texts of at most 20,000 characters and filters): 413 beyond; "
        "max_request_bytes caps it",
    )

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
    max_concurrent_evals: int = Field(
        2,
        ge=1,
        description="eval runs at once per process (one kept for monitoring runs, one tenant at most all but one); "
        "more wait in a queue per caller group, served in turn (eval_queue_per_group)",
    )
    eval_queue_per_group: int = Field(
        4,
        ge=0,
        description="eval runs one caller group (a tenant's keys; the keys bound to no tenant) may have waiting for a "
        "slot per process, background and waited on together; past it 429 with Retry-After; 0: no queue",
    )
    eval_queue_wait_seconds: float = Field(
        30,
        ge=0,
        description="how long an eval run waited on (not async) waits for its turn in the queue, then 429 with "
        "Retry-After; a background run waits until its turn",
    )
    eval_timeout_seconds: float = Field(
        600, gt=0, description="an eval run asked for over HTTP stops past this (504; a background run's job fails)"
    )
    search_timeout_seconds: float = Field(30, gt=0, description="a search answers 504 past this")
    rate_limit: str | None = Field(
        "6000/minute",
        description="requests one API key may make, a moving window (limits' notation: 6000/minute, or several as "
        '"20/second;6000/minute"); past it 429 with Retry-After; /health/* never counts; empty: no limit',
    )
    rate_limit_per_address: str | None = Field(
        None,
        description="requests one client address may make to what needs no key (every endpoint with auth off; the "
        "page, the docs and an open /metrics with auth on), in the same notation; unset: no limit (behind a proxy "
        "every caller has its address)",
    )

    # state store and incidents
    state_url: str | None = Field(
        None,
        description="where incidents, writable sets, runs, baselines, API keys and the audit log live: a SQLAlchemy "
        "URL such as postgresql://user:pass@host/db (replicas share it); default SQLite at DATA_DIR/state.db",
    )
    incident_set: str = Field("incidents", description="the labelled set a report names no set joins")
    incidents_count_new: bool = Field(
        False, description="also evaluate incidents not yet reviewed (accepted ones always count, rejected never)"
    )
    fail_on_regressed_incidents: bool = Field(
        True,
        description="the gate policy of a baseline promoted without one (and of one stored before policies) fails "
        "a run when an accepted incident that passed before fails now",
    )

    eval_expected_intervals: dict[str, float] = Field(
        default_factory=dict,
        description="sets whose monitoring runs are started from outside (a Kubernetes CronJob) -> seconds expected "
        'between runs, e.g. {"handbook": 3600} (JSON): exported as plumbline_eval_schedule_interval_seconds like '
        "PLUMBLINE_EVAL_SCHEDULE's, so that the overdue alerts fire in every scheduling mode",
    )
    eval_on_corpus_change: float = Field(
        0.1,
        ge=0,
        le=10,
        description="a scheduled set also gets a monitoring run when the committed corpus has grown or shrunk by more "
        "than this share of its documents or chunks since the set's last one, once the corpus has settled (the same "
        "size at two scheduler ticks); 0: only the schedule",
    )

    # the LLM that writes synthetic questions and judges answers (any OpenAI-compatible chat-completions server)
    llm_base_url: str | None = Field(
        None,
        description="an OpenAI-compatible API's base URL (it posts to BASE/chat/completions), e.g. "
        "http://127.0.0.1:8080/v1 (llama.cpp's server), http://localhost:11434/v1 (Ollama), https://api.openai.com/v1; "
        "unset: synthetic sets and answer grading say what to set",
    )
    llm_model: str | None = Field(None, description="the model name the LLM server knows, e.g. qwen2.5:7b-instruct")
    llm_api_key: SecretStr | None = Field(
        None, description="the LLM server's key (Bearer), if it asks for one; prefer llm_api_key_file"
    )
    llm_api_key_file: Path | None = Field(
        None, description="a file holding the LLM server's key (a mounted secret); read at start-up"
    )
    llm_timeout_seconds: float = Field(60, gt=0, description="one LLM request's limit; a timed-out request is retried")
    llm_max_concurrency: int = Field(4, ge=1, le=64, description="LLM requests in flight at once, per job")
    llm_max_retries: int = Field(
        4,
        ge=0,
        le=10,
        description="retries of an LLM request on 429, 5xx or a timeout, with backoff (Retry-After honoured)",
    )
    answer_recall_threshold: float = Field(
        0.8,
        ge=0,
        le=1,
        description="an answer-grading report says to fix retrieval first when the set's latest recall@10 is "
        "below this",
    )
    sweep_max_configs: int = Field(
        200,
        ge=1,
        le=5000,
        description="the most configurations one sweep may evaluate (a larger grid: use random search)",
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
        description="on: every endpoint but the open ones (/health/*, /metrics unless metrics_auth, the web page and "
        "the API docs) needs an API key with the right role; off: anyone may do anything (the local demo only: every "
        "response then carries X-Plumbline-Auth: off)",
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
    allowed_hosts: list[str] | None = Field(
        None,
        description="the host names a request's Host header may carry, any port (JSON in PLUMBLINE_ALLOWED_HOSTS, "
        'e.g. ["plumbline.lan", "*.corp.example"]; "*": any); others get 421. Unset: with auth off, localhost, '
        "127.0.0.1, [::1] and the host serve --host names (against DNS rebinding); with auth on, any",
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per line (for log collectors); text: for a terminal"
    )

    @field_validator("rate_limit", "rate_limit_per_address", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        """An empty value turns the limit off; any other must parse (e.g. 600/minute, 10/second;600/minute)."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, str):
            try:
                parse_many(value)
            except ValueError:
                hint = "write e.g. 600/minute or 10/second;600/minute"
                raise ValueError(f"{value!r} is not a rate limit: {hint}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size // 2:
            raise ValueError("chunk_overlap must be under half of chunk_size")
        if self.backend == "qdrant" and not self.qdrant_url:
            raise ValueError("backend 'qdrant' needs qdrant_url (PLUMBLINE_QDRANT_URL)")
        if self.qdrant_write_consistency > self.qdrant_replication_factor:
            raise ValueError("qdrant_write_consistency cannot exceed qdrant_replication_factor")
        if any(seconds < 1 for seconds in (*self.eval_schedule.values(), *self.eval_expected_intervals.values())):
            raise ValueError("eval_schedule and eval_expected_intervals intervals are seconds, at least 1")
        if (
            self.default_k > self.max_k
            or self.default_candidates > self.max_candidates
            or self.default_rerank_depth > self.max_rerank_depth
        ):
            raise ValueError("default_k, default_candidates and default_rerank_depth must not exceed their max_")
        return self

    def llm_key(self) -> str | None:
        """The LLM server's key: from `llm_api_key_file` (a mounted secret) if set, else `llm_api_key`."""
        if self.llm_api_key_file is not None:
            try:
                return self.llm_api_key_file.read_text(encoding="utf-8").strip() or None
            except OSError as exc:
                raise ValueError(f"PLUMBLINE_LLM_API_KEY_FILE {self.llm_api_key_file} cannot be read: {exc}") from None
        return self.llm_api_key.get_secret_value() if self.llm_api_key is not None else None

    @property
    def state_store_url(self) -> str:
        return self.state_url or f"sqlite:///{self.data_dir / 'state.db'}"

    @property
    def legacy_eval_dir(self) -> Path:
        """Where the file layout before the state store kept sets, runs and baselines (imported once)."""
        return self.data_dir / "eval"


def declared(name: str) -> Any:
    """The default `Settings` declares for field `name` (the environment aside): where a plain dataclass of the
    service needs a default of its own, this is its one definition.

    Example:
        >>> declared("default_k"), declared("max_k")
        (10, 100)
    """
    return Settings.model_fields[name].default

"""Wiring: build the components from Settings, warm them up, and report readiness.

`warm_up()` takes the data directory's lock, opens the state store (migrating it), loads the models, opens the
index, runs the integrity check (logging what it finds, repairing leftovers and statuses unless
`repair_on_start` is off) and ingests any preload folders; until it has finished, `index` and `pipeline`
raise `NotReady` and `/health/ready` answers 503, as it does whenever the store refuses writes. Tests inject
fakes through `Components` instead of patching.
"""

from __future__ import annotations

import datetime as dt
import functools
import gc
import json
import logging
import platform
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from eval.errors import EvalError
from eval.storage import RunStore, SetStore
from service.access.keys import Authenticator
from service.errors import (
    Conflict,
    DataDirLocked,
    DataDirUnavailable,
    InsufficientStorage,
    NotReady,
    PlumblineError,
    StoreUnreachable,
    public,
)
from service.evaluation.answers import Grader
from service.evaluation.calibration import KEY as NO_ANSWER_KEY
from service.evaluation.calibration import CalibrationRequest, calibrate
from service.evaluation.hygiene import HygieneService
from service.evaluation.incidents import IncidentService
from service.evaluation.runs import EvalService, run_spec
from service.evaluation.schedule import Scheduler
from service.evaluation.served import KEY as SERVED_KEY
from service.evaluation.served import served_settings
from service.evaluation.sweeps import SCRATCH, Served, Sweeper, directory_bytes, token_counter
from service.evaluation.synthesis import Synthesizer
from service.evaluation.tuning import Candidate, Tuner
from service.filters import FilterSpec, build_filter
from service.index.chunking import Chunker, ChunkerConfig
from service.index.generations import BASE, Generation, Generations, sync
from service.index.index import Index, IndexLimits
from service.index.loaders import iter_documents
from service.infra import logs
from service.infra.datadir import DataDirLock
from service.infra.faults import crash_point
from service.infra.observability import ServiceMetrics
from service.options import RunOptions, SearchOverrides
from service.retrieval.embedding import Embedder, SentenceTransformerEmbedder, resolve_model_path
from service.retrieval.embedding_cache import CachedEmbedder
from service.retrieval.finetune import TrainStats, fine_tune
from service.retrieval.no_answer import Calibration
from service.retrieval.onnx_models import OnnxCrossEncoder, OnnxEmbedder
from service.retrieval.pipeline import Limits, SearchPipeline, search_params
from service.retrieval.rerank import CrossEncoderReranker, PairScorer, Reranker, TorchCrossEncoder
from service.retrieval.sparse import Bm25Params
from service.retrieval.tokenizer import Tokenizer, TokenizerConfig
from service.settings import PACKAGED_MODEL, Settings
from service.state import StateStore, open_state
from service.state.audit import AuditRecords, Pending
from service.state.store import StateUnavailable
from service.state.work import DraftRecords, ResultRecords
from service.stores.base import VectorStore

if TYPE_CHECKING:
    from service.infra.llm import ChatClient
    from service.stores.qdrant import QdrantOptions

log = logging.getLogger("plumbline")
STATE_CHECK_SECONDS = 5.0  # how often a shared state store is asked whether it answers (readiness)
CORPUS_ACTIONS = ("documents.ingest", "documents.delete")  # the audited changes of the corpus (`corpus_size`)
RETIRE_GRACE_SECONDS = 10.0  # how long a store switched away from stays open for the searches still in it
SERVED_REFRESH_SECONDS = 15.0  # how often a replica reads the promoted search defaults (`Runtime.refresh_served`)
PRELOAD_BATCH = 16  # documents per ingest batch at start-up: a progress line after each
T = TypeVar("T")


@dataclass(frozen=True)
class Components:
    """Factories for the heavy parts; defaults build the real ones from settings."""

    embedder: Callable[[Settings], Embedder] | None = None
    reranker: Callable[[Settings], Reranker | None] | None = None
    store: Callable[[Settings], VectorStore] | None = None
    trainer: Callable[..., TrainStats] | None = None  # fine-tunes the embedding model (`finetune.fine_tune`)


def model_device(settings: Settings) -> str:
    """`cpu` or `cuda`, from `PLUMBLINE_DEVICE`; asking for cuda where there is none is a start-up error."""
    if settings.device == "cpu" or (settings.device == "auto" and not Path("/proc/driver/nvidia").exists()):
        return "cpu"  # auto without an NVIDIA driver: no GPU, and no 2.5 s spent importing torch to learn it
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if settings.device == "cuda":
        raise PlumblineError("PLUMBLINE_DEVICE=cuda but torch sees no GPU: set auto or cpu")
    return "cpu"


def _onnx(settings: Settings) -> Path | None:
    """The model cache when the models run on ONNX Runtime (CPU and `encoder_runtime=onnx`), else None (torch)."""
    if settings.encoder_runtime != "onnx" or model_device(settings) != "cpu":
        return None
    return settings.model_cache or settings.data_dir / "models"


def build_embedder(settings: Settings) -> Embedder:
    """The configured embedding model; a tuned one (`tuned:<name>`, `plumbline tune`) from its folder in the data
    directory, under its name."""
    s, cache = settings, _onnx(settings)
    folder = Generations(s.data_dir, s.embedding_model).model_dir(s.embedding_model)
    model, name = (str(folder), s.embedding_model) if folder is not None else (s.embedding_model, None)
    if cache is not None:
        return OnnxEmbedder(
            model,
            name=name,
            cache=cache,
            threads=s.torch_threads,
            batch_size=s.embedding_batch_size,
            query_prefix=s.query_prefix,
            document_prefix=s.document_prefix,
            document_nice=s.ingest_nice,
        )
    return SentenceTransformerEmbedder(
        model,
        name=name,
        device=model_device(s),
        batch_size=s.embedding_batch_size,
        query_prefix=s.query_prefix,
        document_prefix=s.document_prefix,
    )


def build_reranker(settings: Settings) -> Reranker | None:
    model = settings.rerank_model
    if not model:
        return None
    s, cache = settings, _onnx(settings)
    analyser = Tokenizer(tokenizer_config(s)) if s.rerank_focus else None
    max_tokens = s.rerank_max_tokens
    scorer: PairScorer = (
        OnnxCrossEncoder(model, cache=cache, max_tokens=max_tokens, threads=s.torch_threads, int8=s.rerank_int8)
        if cache is not None
        else TorchCrossEncoder(model, max_tokens=max_tokens, device=model_device(s))
    )
    return CrossEncoderReranker(scorer, concurrency=s.rerank_concurrency, analyser=analyser)


def tokenizer_config(settings: Settings) -> TokenizerConfig:
    """The keyword search's analysis as configured: the index's (its manifest must agree) and the rerank window's."""
    return TokenizerConfig(stemmer=settings.stemmer, stopwords=settings.stopwords)


def build_store(settings: Settings, index_dir: Path | None = None) -> VectorStore:
    """The configured vector store; the embedded one in `index_dir` (default: `<data dir>/index`)."""
    if settings.backend == "qdrant":
        from service.stores.qdrant import QdrantStore, connect

        options = qdrant_options(settings)
        client = connect(settings.qdrant_url or "", settings.qdrant_api_key, options)
        return QdrantStore(client, settings.collection, options)
    from service.stores.mirrored import MirroredStore, single_copy

    index = index_dir or settings.data_dir / "index"
    if settings.index_copies == 2:
        return MirroredStore(index, graph_from=settings.index_graph_from)
    return single_copy(index, graph_from=settings.index_graph_from)


def qdrant_options(settings: Settings) -> QdrantOptions:
    from service.stores.qdrant import QdrantOptions  # qdrant-client takes over a second to import: only when used

    s = settings
    return QdrantOptions(
        timeout=s.qdrant_timeout,
        connect_timeout=s.qdrant_connect_timeout,
        retries=s.qdrant_retries,
        shards=s.qdrant_shards,
        replication_factor=s.qdrant_replication_factor,
        write_consistency=s.qdrant_write_consistency,
        on_disk=s.qdrant_on_disk,
        quantization=s.qdrant_quantization == "int8",
        hnsw_m=s.qdrant_hnsw_m,
        hnsw_ef_construct=s.qdrant_hnsw_ef_construct,
        hnsw_ef=s.qdrant_hnsw_ef,
        rescore=s.qdrant_rescore,
    )


class Runtime:
    """The service's live state: components, readiness, and the reason when not ready.

    Example:
        >>> rt = Runtime(Settings(data_dir=Path("/tmp/pl")))  # doctest: +SKIP
        >>> rt.warm_up(); rt.pipeline.search("vpn error", SearchParams())  # doctest: +SKIP
    """

    def __init__(
        self,
        settings: Settings,
        components: Components | None = None,
        metrics: ServiceMetrics | None = None,
        preload: tuple[Path, ...] = (),
    ) -> None:
        self.base_settings = settings  # as configured; `settings` adds promoted search defaults (`refresh_served`)
        self.settings = settings
        self._served_checked = 0.0
        self.no_answer: Calibration | None = None  # the learned "nothing matches" threshold (`refresh_served`)
        self.components = components or Components()
        self.metrics = metrics
        self.preload = preload
        self.error: str | None = None
        self._waiting: str | None = None  # why warm-up is waiting (an unreachable vector store), shown by readiness
        self._closing = threading.Event()
        self._patient = False  # the server's warm-up waits for an unreachable vector store; a CLI's does not
        self._store: VectorStore | None = None  # once built, so that close() closes it even if warm-up gave up
        self.lock = DataDirLock(settings.data_dir)
        self.generations = Generations(settings.data_dir, settings.embedding_model)  # the embedded index's (tune)
        self._switching = threading.Lock()  # one generation switch at a time
        self._retired: dict[Path, VectorStore] = {}  # stores of generations switched away from, closed after a grace
        self._retiring = threading.Lock()  # guards _retired and the closing of its stores
        self._state: StateStore | None = None
        self._authenticator: Authenticator | None = None
        self._evals: EvalService | None = None
        self._incidents: IncidentService | None = None
        self._index: Index | None = None
        self._pipeline: SearchPipeline | None = None
        self._tokens: Callable[[str], int] | None = None
        self._state_down: str | None = None  # why a shared state store does not answer (`_watch_state`), or None
        self._corpus_at: dict[str, dict[str, int]] = {}  # a monitoring run's corpus, by run id (read once)
        self._corpus_seen: dict[str, tuple[int, int]] = {}  # the corpus's size at the scheduler's last tick, by set
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.scheduler = Scheduler(settings.eval_schedule, self._monitor)
        if metrics is not None:  # read at every scrape: what the probes would answer now
            metrics.ready.set_function(lambda: 1.0 if self.ready and not self.unready_reason() else 0.0)
            metrics.live.set_function(lambda: 0.0 if self.broken_reason() else 1.0)
            metrics.build.info(
                {
                    "version": version("plumbline"),
                    "python": platform.python_version(),
                    "backend": settings.backend,
                    "state": settings.state_store_url.split(":", 1)[0].split("+", 1)[0],  # sqlite, postgresql
                }
            )

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def broken_reason(self) -> str | None:
        """A failure only a restart cures, or None: the embedded store refusing writes after a failed one, or one of
        its engine processes dead. Liveness answers 503 with it, so the orchestrator restarts the process (a Qdrant
        server that does not answer is transient: readiness only). Reads flags only."""
        if self._index is None or self.settings.backend != "edge":
            return None
        return self._index.store.health()

    def unready_reason(self) -> str | None:
        """Why the service should get no traffic now (loading, a failed start, a store refusing writes), or
        None; safe to show (no file paths). Reads flags only: it never waits on the engine."""
        if not self.ready:
            return public(self.error) if self.error else self._waiting
        if self._state_down is not None:
            return self._state_down
        return self._index.store.health() if self._index is not None else None

    def reserve_space(self, needed: int) -> None:
        """Refuse a write of `needed` bytes that would leave under `min_free_disk_mb` on the data directory's disk."""
        free = shutil.disk_usage(self.settings.data_dir).free
        reserve = self.settings.min_free_disk_mb * 2**20
        if free - needed < reserve:
            raise InsufficientStorage(
                f"the disk holding the data directory has {free / 2**20:.1f} MB free; this write needs about "
                f"{needed / 2**20:.1f} MB and {self.settings.min_free_disk_mb} MB must stay free "
                "(PLUMBLINE_MIN_FREE_DISK_MB): free some space or move the data directory. Nothing was written."
            )

    def _started(self, part: T | None) -> T:
        """`part` once warm-up has finished; `NotReady` (with the reason, if it failed) before."""
        if part is None or not self.ready:
            raise NotReady(self.error or "the service is still starting (loading models); retry shortly")
        return part

    @property
    def index(self) -> Index:
        return self._started(self._index)

    @property
    def pipeline(self) -> SearchPipeline:
        return self._started(self._pipeline)

    @property
    def evals(self) -> EvalService:
        return self._started(self._evals)

    @property
    def incidents(self) -> IncidentService:
        return self._started(self._incidents)

    @property
    def authenticator(self) -> Authenticator:
        """Checks API keys once the state store is open (early in warm-up, before the models load)."""
        if self._authenticator is None:
            raise NotReady(self.error or "the service is still starting (opening the state store); retry shortly")
        return self._authenticator

    @property
    def audit(self) -> AuditRecords:
        if self._state is None:
            raise NotReady(self.error or "the service is still starting (opening the state store); retry shortly")
        return self._state.audit

    @property
    def state(self) -> StateStore | None:
        """The state store once opened (for collectors that read it at scrape time), else None."""
        return self._state

    @property
    def results(self) -> ResultRecords:
        """Syntheses, sweeps and answer gradings (`service.state.work`)."""
        return self._started(self._state).results

    @property
    def drafts(self) -> DraftRecords:
        return self._started(self._state).drafts

    def llm(self) -> ChatClient:
        """A new client of the configured LLM; `LLMNotConfigured`, saying what to set, when there is none."""
        from service.infra.llm import ChatClient, LLMConfig, LLMNotConfigured  # httpx: not for a server that never asks

        s = self.settings
        if not s.llm_base_url or not s.llm_model:
            raise LLMNotConfigured()
        return ChatClient(
            LLMConfig(
                base_url=s.llm_base_url,
                model=s.llm_model,
                api_key=s.llm_key(),
                timeout=s.llm_timeout_seconds,
                max_concurrency=s.llm_max_concurrency,
                max_retries=s.llm_max_retries,
            )
        )

    def synthesizer(self) -> Synthesizer:
        """Drafts synthetic cases with the configured LLM (`LLMNotConfigured` without one)."""
        self.llm().close()  # the settings checked now, before a job starts
        s = self.settings
        return Synthesizer(self.index, self.pipeline.embedder, self.drafts, self.results, self.llm, s.llm_model or "")

    def grader(self) -> Grader:
        """Grades answers with the configured LLM as the judge (`LLMNotConfigured` without one)."""
        self.llm().close()
        return Grader(self.index, self.evals.runs, self.llm, self.settings.llm_model or "")

    def hygiene(self) -> HygieneService:
        """Distractor reports' index side: freshness and near-duplicates of the documents that crowd a run's top k."""
        return HygieneService(self.index, self.pipeline.embedder)

    def sweeper(self) -> Sweeper:
        """Sweeps over the live pipeline and temporary indexes in DATA_DIR/scratch."""
        s = self.settings
        served = Served(
            search_params(s, SearchOverrides(), reranker_configured=self.pipeline.reranker is not None),
            s.chunk_size,
            s.chunk_overlap,
        )
        return Sweeper(
            self.pipeline,
            served,
            self.scratch_index,
            self.index,
            s.data_dir / SCRATCH,
            reserve_space=self.reserve_space,
            live_bytes=lambda: self._served_bytes(every_copy=False),  # a temporary index is one copy
            count_tokens=self._token_counter(),
            max_configs=s.sweep_max_configs,
        )

    def _token_counter(self) -> Callable[[str], int]:
        """Context tokens as the packaged model's tokenizer counts them (loaded once)."""
        if self._tokens is None:
            self._tokens = token_counter(Path(resolve_model_path(PACKAGED_MODEL)) / "tokenizer.json")
        return self._tokens

    def corpus_size(self, tenant: str | None = None) -> dict[str, int]:
        """The committed corpus: documents and chunks (with `tenant`, that tenant's documents), and the id of the
        newest ingest or delete in the audit log (which batches a run covers)."""
        index = self.index
        if tenant is None:
            out = {"documents": index.documents(), "chunks": index.chunks()}
        else:
            spec = FilterSpec(tenant=tenant)
            out = {"documents": index.count_records(build_filter(spec, fresh_only=False, now=dt.datetime.now(dt.UTC)))}
        if self._state is not None:
            out["last_change"] = self._state.audit.latest_id(CORPUS_ACTIONS)
        return out

    def promote_served(self, record: dict[str, Any]) -> None:
        """Store promoted search defaults (`service.evaluation.served`) and serve them here at once; the other replicas
        read them within SERVED_REFRESH_SECONDS."""
        served_settings(self.base_settings, record["defaults"])  # refused (Conflict) past a limit, before storing
        self._publish(SERVED_KEY, record)

    def _publish(self, key: str, record: dict[str, Any]) -> None:
        """Store `record` under the state store's meta `key` and read what `refresh_served` serves at once."""
        self._started(self._state).put_meta(key, json.dumps(record))
        self._served_checked = 0.0
        self.refresh_served()

    def refresh_served(self) -> None:
        """Serve the promoted search defaults and the "nothing matches" threshold stored in the state store, reading
        them at most every SERVED_REFRESH_SECONDS (a request calls this: it costs a clock read otherwise); a store
        that does not answer leaves them as they are."""
        now = time.monotonic()
        if self._state is None or now - self._served_checked < SERVED_REFRESH_SECONDS:
            return
        self._served_checked = now
        try:
            stored = self._state.get_meta(SERVED_KEY)
            settings = served_settings(self.base_settings, json.loads(stored)["defaults"]) if stored else None
            learned = self._state.get_meta(NO_ANSWER_KEY)
            no_answer = Calibration.of(json.loads(learned)) if learned else None
        except (PlumblineError, ValueError, KeyError) as exc:
            log.warning(
                "the promoted search defaults or no-answer threshold could not be read, serving the last: %s", exc
            )
            return
        self.settings = settings or self.base_settings
        self.no_answer = no_answer

    def calibrate_no_answer(self, req: CalibrationRequest) -> dict[str, Any]:
        """Learn the "nothing matches" threshold on `req.sets` over the served configuration, store it (every replica
        serves it within SERVED_REFRESH_SECONDS) and serve it here at once: the record, with its precision and recall
        on both splits."""
        self._started(self._state)  # before any search: refused where no state store is open
        cases = [c for name in req.sets for c in self.evals.cases(name)]
        base = search_params(self.settings, SearchOverrides(), reranker_configured=self.pipeline.reranker is not None)
        record = calibrate(self.pipeline, base, cases, req)
        self._publish(NO_ANSWER_KEY, record)
        return record

    def relearn_no_answer(self) -> dict[str, Any] | None:
        """After the served model changed: the stored "nothing matches" threshold, learned under another model, learned
        again on the same sets, k, seed and beta. None when none is stored or it is this model's; else what was
        learned (`threshold`, `model`, `test`), or `error` when it could not be (searches then say so, as before)."""
        stored = self.no_answer_record()
        if stored is None or stored.get("model") == self.pipeline.embedder.name:
            return None
        req = CalibrationRequest(
            tuple(stored["sets"]), int(stored["k"]), int(stored.get("seed", 0)), float(stored.get("beta", 0.5))
        )
        try:
            record = self.calibrate_no_answer(req)
        except (PlumblineError, EvalError) as exc:
            log.warning("the no-answer threshold could not be learned again for the new model: %s", exc)
            return {"error": str(exc)}
        return {"threshold": record["threshold"], "model": record["model"], "test": record["test"]}

    def no_answer_record(self) -> dict[str, Any] | None:
        """The stored "nothing matches" calibration, if any."""
        stored = self._started(self._state).get_meta(NO_ANSWER_KEY)
        return json.loads(stored) if stored else None

    def _monitor(self, set_name: str, interval: float) -> bool:
        """The scheduler's run: set `set_name` over the served configuration when its interval is due, or when the
        corpus has changed by more than `eval_on_corpus_change` since the set's last monitoring run and has settled
        (the same size at two ticks in a row); True if it ran. The run records why it
        ran and the corpus changes it covers (the audit ids after the previous run's `last_change`)."""
        spec = run_spec(RunOptions(set_name, monitoring=True), self.settings, self.pipeline)
        record: dict[str, Any] = {"trigger": "schedule"}
        due = interval
        if not self.evals.monitoring_due(set_name, interval) and (moved := self._corpus_moved(set_name)) is not None:
            record = {"trigger": "corpus change", "covers_changes_after": moved}
            due = 0.0  # now: the lease makes it one replica's; the run it stores resets what "changed" compares with
        spec = replace(spec, params_record={**spec.params_record, **record})
        # no HTTP caller waits on it: a large set may take longer than PLUMBLINE_EVAL_TIMEOUT_SECONDS
        with self.auditing("scheduler", "eval.run", detail={"set": set_name}):  # stored with the run, if it was due
            ev = self.evals.evaluate(spec, if_older_than=due, limited=False)
        return ev is not None

    def _corpus_moved(self, set_name: str) -> int | None:
        """The previous run's `last_change` when the corpus has grown or shrunk by more than `eval_on_corpus_change`
        (documents or chunks) since the set's latest monitoring run, and is the same size as at the previous tick
        (settled: a run does not start in the middle of a bulk load); None otherwise (or off, or no run yet)."""
        share = self.settings.eval_on_corpus_change
        latest = self.evals.runs.latest_ids("monitoring").get(set_name)
        if not share or latest is None:
            return None
        then = self._corpus_at.get(latest)
        if then is None:
            then = self._corpus_at[latest] = dict(self.evals.runs.get(latest).params.get("corpus") or {})
        now = self.corpus_size()
        sizes = (now["documents"], now["chunks"])
        settled, self._corpus_seen[set_name] = self._corpus_seen.get(set_name) == sizes, sizes
        if not then or not settled:
            return None
        moved = max(
            abs(now[key] - then.get(key, 0)) / max(1, then.get(key, 0))
            for key in ("documents", "chunks")
            if key in then
        )
        return int(then.get("last_change", 0)) if moved > share else None

    def _open_state(self) -> None:
        """Open and migrate the state store (importing a file-layout data directory once) and build the services
        that keep their records there."""
        s = self.settings
        self._state = open_state(s.state_store_url, s.legacy_eval_dir)
        if s.state_url is None and (orphans := self._state.jobs.orphan_all()):
            # SQLite in the data directory, whose lock this process holds: a job still running belonged to one that died
            log.warning("%d job(s) of a process that stopped are lost (a synthesis among them can be resumed)", orphans)
        self._authenticator = Authenticator(self._state.keys, s.api_keys_file)
        if s.auth == "on" and not self._authenticator.all_keys():
            log.warning(
                "auth is on and there is no API key yet: every request but /health/* gets 401. Create one with "
                "`plumbline keys create NAME --role admin`, or set PLUMBLINE_AUTH=off for a local demo"
            )
        self._incidents = IncidentService(
            self._state.incidents,
            default_set=s.incident_set,
            count_new=s.incidents_count_new,
            tenant_max_reports=s.tenant_max_incident_reports,
        )
        self._evals = EvalService(
            SetStore(self._state),
            RunStore(self._state),
            jobs=self._state.jobs,
            leases=self._state.leases,
            incidents=self._incidents,
            max_concurrent=s.max_concurrent_evals,
            queue_per_group=s.eval_queue_per_group,
            queue_wait=s.eval_queue_wait_seconds,
            tenant_max_runs=s.tenant_max_runs,
            timeout=s.eval_timeout_seconds,
            reserve_space=self.reserve_space,
            corpus=self.corpus_size,
        )

    def take_lock(self) -> bool:
        """Take the data directory's lock: `DataDirLocked` propagates (another process holds it); a directory
        that cannot be used is remembered as the reason the service is not ready, and False returned."""
        try:
            self.lock.acquire()
        except DataDirLocked:
            raise
        except DataDirUnavailable as exc:
            self.error = str(exc)
            log.error("%s", exc)
            return False
        return True

    def start(self) -> None:
        """Take the data directory's lock (raising `DataDirLocked` if another process holds it), then warm
        up in a background thread, so liveness answers while models load (no-op once warm). A directory that
        cannot be written leaves the service up but never ready, its readiness saying why."""
        if self.ready or self._thread is not None or self.error:
            return
        if not self.take_lock():
            return
        self._thread = threading.Thread(target=self._warm_up_logged, name="plumbline-warm-up", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ready

    def _warm_up_logged(self) -> None:
        """The server's start (`start`): warm up, then schedule the monitoring runs. A CLI that warms up a runtime
        of its own (`eval run`, `doctor`, `ingest`) runs no schedule."""
        self._patient = True
        try:
            self.warm_up()
        except Exception as exc:
            if self._closing.is_set():
                return
            self.error = f"warm-up failed: {exc}"
            log.exception("warm-up failed")
            return
        self.scheduler.start()
        if self.settings.state_url is not None and self._state is not None and self._state.backend != "sqlite":
            threading.Thread(target=self._watch_state, name="plumbline-state-watch", daemon=True).start()

    def _watch_state(self) -> None:
        """A shared state store (PostgreSQL) asked every STATE_CHECK_SECONDS whether it answers: readiness (and
        `plumbline_ready`) turn false while it does not, and true again when it does, reading a flag only."""
        state = self._state
        while state is not None and not self._closing.wait(STATE_CHECK_SECONDS):
            try:
                state.ping()
            except Exception as exc:  # any failure to answer is an outage to route around, not a crash
                if self._state_down is None:
                    log.warning("the state store does not answer: not ready until it does (%s)", public(str(exc)))
                self._state_down = StateUnavailable.MESSAGE
            else:
                if self._state_down is not None:
                    log.info("the state store answers again: ready")
                self._state_down = None

    def warm_up(self, *, check: bool = True, search: bool = True) -> None:
        """Take the lock, load the models, open the store, run the integrity check (unless `check` is off:
        `plumbline doctor` runs its own), ingest the preload folders, then turn ready. With `search` off (`doctor`,
        `ingest`: commands that never search) there is no cross-encoder to load, nor a search pipeline: a rerank
        model that is missing or not exported yet neither fails nor slows them."""
        s = self.settings
        self.lock.acquire()
        # temporary indexes of sweeps a dead process left (no sweep outlives its process: the lock is ours now)
        shutil.rmtree(s.data_dir / SCRATCH, ignore_errors=True)
        if self._state is None:
            self._open_state()
        self._serve_generation()
        self.refresh_served()
        s = self.settings
        if s.torch_threads:
            import torch

            torch.set_num_threads(s.torch_threads)
        embedder = self._embedder(s, seed=True)
        reranker = (self.components.reranker or build_reranker)(s) if search else None
        if self.components.store is not None:
            store = self._store = self.components.store(s)
        else:
            served = self.generations.index_path(self.generations.serving()) if s.backend == "edge" else None
            store = self._store = build_store(s, served)
        embedder.embed_queries(["warm-up"])  # the first forward pass is slow: pay it before readiness
        if reranker is not None:
            reranker.score("warm-up", ["warm-up"])
        index = self._until_reachable(lambda: self._open_index(store, embedder, check=check))
        for folder in self.preload:
            self._until_reachable(functools.partial(self._preload, index, folder))
        self._index = index
        if search:
            self._pipeline = SearchPipeline(
                store,
                embedder,
                index.encoder,
                reranker,
                Limits(s.max_k, s.max_candidates, s.max_rerank_depth, s.max_query_chars),
                observe_stage=self.metrics.observe_stage if self.metrics else None,
            )
        # The models leave hundreds of thousands of objects that every full garbage collection would scan with the GIL
        # held (every request waits). They live as long as the process: move them out of the collector's sight.
        gc.collect()
        gc.freeze()
        self._ready.set()
        log.info("ready: %d documents, %d chunks", index.documents(), index.chunks())

    def _embedder(self, s: Settings, *, seed: bool) -> Embedder:
        """The embedding model `s` names, behind the embedding cache when it is on (seeded from
        `embedding_seed` with `seed`)."""
        embedder = (self.components.embedder or build_embedder)(s)
        if s.embedding_cache:
            path = s.embedding_cache_path or s.data_dir / "embeddings.db"
            embedder = cache = CachedEmbedder(embedder, path, variant=s.document_prefix)
            if seed and s.embedding_seed is not None:
                log.info("embedding cache: %d vector(s) added from %s", cache.seed(s.embedding_seed), s.embedding_seed)
        return embedder

    def _serve_generation(self) -> None:
        """Serve with the model of the embedded index generation `serving.json` names (a promoted tune's, or the
        configured one for the base)."""
        if self.base_settings.backend != "edge":
            return
        gen = self.generations.serving()
        if gen.name != BASE:
            self.generations.check_served(gen)
        if gen.model != self.generations.base.model:
            log.info("serving index generation %s, embedded with %s (plumbline tune)", gen.name, gen.model)
        self.base_settings = self.base_settings.model_copy(update={"embedding_model": gen.model})
        self.settings = self.settings.model_copy(update={"embedding_model": gen.model})

    def open_generation(self, gen: Generation, *, observed: bool = False) -> tuple[Index, SearchPipeline]:
        """An index and a search pipeline over generation `gen` with its own model (the cross-encoder and limits of
        the served pipeline); with `observed`, its stages feed the request metrics. The caller closes its store."""
        s = self.base_settings.model_copy(update={"embedding_model": gen.model})
        embedder = self._embedder(s, seed=False)
        path = self.generations.index_path(gen)
        with self._retiring:  # switched away from within the grace: its files are still held open
            stale = self._retired.pop(path, None)
            if stale is not None:
                stale.close()
        store = build_store(s, path)
        try:
            index = self._build_index(store, embedder, s)
        except BaseException:
            store.close()
            raise
        live = self.pipeline
        observe = self.metrics.observe_stage if observed and self.metrics else None
        return index, SearchPipeline(store, embedder, index.encoder, live.reranker, live.limits, observe_stage=observe)

    def switch_generation(self, gen: Generation, *, known: dict[str, int] | None, reason: str) -> dict[str, int]:
        """Serve generation `gen` from now on, with no downtime: what changed in the live index since `gen` was built
        (`known`: the live documents' generations then; None: check every document) is copied into it while writes
        go on, then once more with the live index's writes held, then `serving.json` names it and searches go to it.
        A write that waited meanwhile is refused (503: send it again, it lands in `gen`). The old store closes after
        RETIRE_GRACE_SECONDS (searches in flight finish there). The documents copied before and while held."""
        with self._switching:
            live, old = self.index, self._store
            old_path = self.generations.index_path(self.generations.serving())
            index, pipeline = self.open_generation(gen, observed=True)
            try:
                known, before = sync(live, index, known)
                with live.held():
                    _, held = sync(live, index, known)
                    self.generations.switch(gen, reason=reason)
                    crash_point("generation:switched")
                    live.retire("the served index generation changed while this write waited: send it again")
                    self._serve_generation()
                    self._index, self._pipeline, self._store = index, pipeline, pipeline.store
            except BaseException:
                pipeline.store.close()
                raise
        self._served_checked = 0.0
        self.refresh_served()
        if old is not None:
            self._retire(old_path, old)
        log.info("now serving index generation %s (%s): %s", gen.name, gen.model, reason)
        return {"copied_before": before["written"], "copied_held": held["written"], "deleted": before["deleted"]}

    def _retire(self, path: Path, store: VectorStore) -> None:
        """Close `store` (of the index at `path`) after RETIRE_GRACE_SECONDS (or sooner: at `close`, or when
        `path` is switched back to)."""
        with self._retiring:
            self._retired[path] = store

        def close() -> None:
            with self._retiring:
                if self._retired.get(path) is store:
                    del self._retired[path]
                    store.close()

        timer = threading.Timer(RETIRE_GRACE_SECONDS, close)
        timer.daemon = True
        timer.start()

    def tuner(self) -> Tuner:
        """Tunes the served model on labelled sets into a new generation of the embedded index (`Conflict` on a
        Qdrant server: its generations are not built yet)."""
        s = self.settings
        if s.backend != "edge":
            raise Conflict(
                "plumbline tune re-embeds the corpus into a new generation of the embedded index; with "
                "PLUMBLINE_BACKEND=qdrant it is not supported yet: tune on an embedded copy (plumbline export/import)"
            )
        gen = self.generations.serving()
        folder = self.generations.model_dir(gen.model)
        live = self.pipeline
        return Tuner(
            Candidate(
                live=live,
                index=self.index,
                served=search_params(s, SearchOverrides(), reranker_configured=live.reranker is not None),
                generations=self.generations,
                base_model=str(folder) if folder is not None else resolve_model_path(s.embedding_model),
                device=model_device(s),
                query_prefix=s.query_prefix,
                document_prefix=s.document_prefix,
                open=self.open_generation,
                train=self.components.trainer or fine_tune,
                reserve_space=self.reserve_space,
                live_bytes=lambda: self._served_bytes(every_copy=True),  # a generation has as many copies
            )
        )

    def _served_bytes(self, *, every_copy: bool) -> int:
        """The bytes of the served index on disk: its first copy's, or (`every_copy`) every copy's."""
        from service.stores.mirrored import copy_paths

        first, second, _ = copy_paths(self.generations.index_path(self.generations.serving()))
        return directory_bytes(first) + (directory_bytes(second) if every_copy else 0)

    def _open_index(self, store: VectorStore, embedder: Embedder, *, check: bool) -> Index:
        """The index over `store`, after the integrity check (logged, and repaired as the settings say)."""
        s = self.settings
        index = self._build_index(store, embedder, s)
        if check:
            grace = 0.0 if s.backend == "edge" else 3600.0  # a shared server may have writes in flight
            found, done, _ = index.check(repair=s.repair_on_start, everything=False, grace=grace)
            log.info("integrity check: %s", "; ".join(found.lines()) + (" (clean)" if found.clean else ""))
            for action in done:
                log.warning("integrity repair: %s", action)
            if done:
                self.record("start-up check", "index.repair", str(s.data_dir), {"done": done})
        return index

    def _build_index(self, store: VectorStore, embedder: Embedder, s: Settings) -> Index:
        """An `Index` over `store`, chunked, analysed and limited as `s` says."""
        return Index(
            store,
            embedder,
            Chunker(ChunkerConfig(s.chunk_size, s.chunk_overlap)),
            tokenizer_config(s),
            Bm25Params(k1=s.bm25_k1, b=s.bm25_b, avg_len=s.bm25_avg_len or 1.0),
            measure_avg_len=s.bm25_avg_len is None,
            limits=IndexLimits(s.max_batch_documents, s.max_document_chars, s.tenant_max_documents),
            reserve_space=(lambda needed: self.reserve_space(needed * s.index_copies)) if s.backend == "edge" else None,
        )

    def scratch_index(self, directory: Path, chunk_size: int, chunk_overlap: int) -> tuple[Index, SearchPipeline]:
        """A temporary embedded index in `directory` (one copy, in this process), chunked as asked, searched with this
        runtime's models and limits: what a sweep's chunking rows are measured on, never the live index. The caller
        closes its store (`pipeline.store.close()`) and removes the directory."""
        from service.stores.mirrored import single_copy

        s = self.settings.model_copy(
            update={
                "data_dir": directory,
                "backend": "edge",
                "index_copies": 1,
                "chunk_size": chunk_size,
                "chunk_overlap": chunk_overlap,
            }
        )
        live = self.pipeline
        store = single_copy(directory / "index", graph_from=s.index_graph_from)
        index = self._build_index(store, live.embedder, s)
        return index, SearchPipeline(store, live.embedder, index.encoder, live.reranker, live.limits)

    def _until_reachable(self, step: Callable[[], T]) -> T:
        """`step()`, once the vector store answers. In the server (`start`), while a Qdrant server does not answer,
        readiness says so and the step is retried with backoff (1 s, doubling to 30 s) until it succeeds or the
        runtime closes. A store that answers with a refusal (a wrong API key, a bad request), the embedded store's
        failures, and a CLI's start (which nobody would see waiting) fail at once."""
        delay = 1.0
        while True:
            try:
                result = step()
            except StoreUnreachable as exc:
                if not self._patient or self._closing.is_set():
                    raise
                self._waiting = f"waiting for the vector store: {exc}"
                log.warning("%s; retrying in %.0f s", self._waiting, delay)
                if self._closing.wait(delay):
                    raise
                delay = min(delay * 2, 30.0)
                continue
            self._waiting = None
            if self._closing.is_set():
                raise NotReady("the service is stopping")
            return result

    def _preload(self, index: Index, folder: Path) -> None:
        """Ingest `folder` in small batches, logging the progress after each (the first start's long minute)."""
        docs = list(iter_documents(folder))
        size = min(PRELOAD_BATCH, self.settings.max_batch_documents)
        start, chunks, unchanged = time.monotonic(), 0, 0
        for at in range(0, len(docs), size):
            result = index.ingest(docs[at : at + size])
            chunks, unchanged = chunks + result.chunks, unchanged + result.unchanged
            rate = chunks / max(time.monotonic() - start, 1e-9)
            done = min(at + size, len(docs))
            log.info(
                "preloading %s: %d/%d documents, %d chunks written, %d documents unchanged (%.1f chunks/s)",
                folder,
                done,
                len(docs),
                chunks,
                unchanged,
                rate,
            )
        detail = {"documents": len(docs), "chunks": chunks, "unchanged": unchanged}
        self.record("serve --ingest", "documents.ingest", str(folder), detail)

    def record(
        self, actor: str, action: str, target: str, detail: Mapping[str, object], tenant: str | None = None
    ) -> None:
        """The audit entry of something that has happened outside the state store (a repair, a preload, a refused
        request), with the request's id if a request made it (`AuditRecords.record`: logged if it cannot be written)."""
        self.audit.record(Pending(actor, tenant, action, target, dict(detail), request_id=logs.request_id.get()))

    def auditing(
        self,
        actor: str,
        action: str,
        target: str = "",
        detail: Mapping[str, object] | None = None,
        *,
        tenant: str | None = None,
        after: bool = False,
    ) -> AbstractContextManager[Pending]:
        """Declare the audit entry of the change the block makes, written in the state-store transaction that makes it
        (or after the block, with `after`: a change kept in the vector index); see `AuditRecords.auditing`."""
        entry = Pending(actor, tenant, action, target, dict(detail or {}), request_id=logs.request_id.get())
        return self.audit.auditing(entry, after=after)

    def close(self) -> None:
        self._closing.set()  # a warm-up waiting for the vector store gives up at once
        self.wait()  # (one loading models finishes loading first)
        if self._evals is not None:  # first: a scheduled run in progress stops at its next batch too
            self._evals.shutdown()
        self.scheduler.stop()
        self._ready.clear()
        try:
            with self._retiring:
                for store in self._retired.values():
                    store.close()
                self._retired.clear()
            if self._store is not None:
                self._store.close()
            if self._state is not None:
                self._state.close()
        finally:
            self.lock.release()

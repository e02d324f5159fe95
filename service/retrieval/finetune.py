"""Fine-tuning the embedding model on labelled questions: (question, the passage that answers it, a passage the search
ranked above it that does not) triples, a contrastive loss with in-batch and mined hard negatives
(sentence-transformers' `MultipleNegativesRankingLoss`), a plain torch loop (AdamW, linear warm-up and decay), the
result saved as a sentence-transformers folder. CPU by default, a GPU where `device` says so.

Texts are what the service embeds: each query and passage with its prefix (`query_prefix`, `document_prefix`), the
passage's title and heading path included (`Chunk.embed_text`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("plumbline")


@dataclass(frozen=True)
class Example:
    """One labelled question: the passage that answers it, and passages that do not, hardest first."""

    query: str
    positive: str
    negatives: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainConfig:
    """How the model is trained. The defaults suit a few hundred questions on a CPU (minutes)."""

    epochs: int = 2
    learning_rate: float = 2e-5
    batch_size: int = 16
    warmup_share: float = 0.1
    seed: int = 0
    max_seq_length: int = 256


@dataclass(frozen=True)
class TrainStats:
    """What a training run did."""

    examples: int
    steps: int
    first_loss: float
    last_loss: float
    seconds: float
    device: str
    config: TrainConfig

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["first_loss"], out["last_loss"] = round(self.first_loss, 4), round(self.last_loss, 4)
        out["seconds"] = round(self.seconds, 1)
        return out


def batches(examples: Sequence[Example], size: int, rng: random.Random) -> list[list[Example]]:
    """The examples shuffled into batches in which no passage is twice a positive and no question twice (the loss
    treats every other row's positive as a negative: a duplicate would be a negative of itself). An example that would
    repeat one waits for the next batch.

    Example:
        >>> ex = [Example("q1", "p"), Example("q2", "p"), Example("q3", "r")]
        >>> [[e.query for e in b] for b in batches(ex, 2, random.Random(0))]
        [['q1', 'q3'], ['q2']]
    """
    pending = list(examples)
    rng.shuffle(pending)
    out: list[list[Example]] = []
    while pending:
        batch: list[Example] = []
        seen: set[str] = set()
        waiting: list[Example] = []
        for e in pending:
            if len(batch) < size and e.positive not in seen and e.query not in seen:
                batch.append(e)
                seen.update((e.positive, e.query))
            else:
                waiting.append(e)
        out.append(batch)
        pending = waiting
    return out


def _on(features: dict[str, Any], device: Any) -> dict[str, Any]:
    """A batch's features with its tensors moved to `device` (the rest, such as the modality, kept)."""
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in features.items()}


def fine_tune(
    base: str,
    examples: Sequence[Example],
    out_dir: Path,
    config: TrainConfig,
    *,
    device: str = "cpu",
    query_prefix: str = "",
    document_prefix: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> TrainStats:
    """Train the sentence-transformers model at `base` on `examples` and save it to `out_dir`; `progress(step,
    steps)` after each step (the caller's heartbeat: it may raise to stop). Each example contributes its hardest
    negative in the first epoch, its next in the second, and so on."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    if not examples:
        raise ValueError("no training example")
    start = time.perf_counter()
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    model: Any = SentenceTransformer(base, device=device)
    model.max_seq_length = min(config.max_seq_length, model.max_seq_length or config.max_seq_length)
    loss_fn = MultipleNegativesRankingLoss(model)
    plan = [batches(examples, config.batch_size, rng) for _ in range(config.epochs)]
    steps = sum(len(p) for p in plan)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    warmup = max(1, int(steps * config.warmup_share))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup))
    )
    model.train()
    first = last = float("nan")
    step = 0
    for epoch, epoch_batches in enumerate(plan):
        for batch in epoch_batches:
            columns = [
                [query_prefix + e.query for e in batch],
                [document_prefix + e.positive for e in batch],
            ]
            negatives = [e.negatives[epoch % len(e.negatives)] for e in batch if e.negatives]
            if len(negatives) == len(batch):  # a column needs one per row; otherwise in-batch negatives only
                columns.append([document_prefix + n for n in negatives])
            features = [_on(model.preprocess(texts), model.device) for texts in columns]
            value = loss_fn(features, None)
            optimizer.zero_grad()
            value.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            last = float(value.detach())
            first = last if step == 0 else first
            step += 1
            if progress is not None:
                progress(step, steps)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir))
    seconds = time.perf_counter() - start
    log.info(
        "fine-tuned %s on %d examples: %d steps, loss %.3f -> %.3f, %.0f s",
        base,
        len(examples),
        step,
        first,
        last,
        seconds,
    )
    return TrainStats(len(examples), step, first, last, seconds, device, config)

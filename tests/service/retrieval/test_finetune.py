"""Fine-tuning the embedding model: the batches (no passage or question twice in one), a real training run on a tiny
model (questions move towards their passages), the saved folder served by ONNX Runtime as by torch, under its name."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from service.retrieval.finetune import Example, TrainConfig, batches, fine_tune
from tests.conftest import TINY_WORDS

WORDS = TINY_WORDS[:60]


def examples() -> list[Example]:
    """Twelve questions of three words, each answered by a passage of three other words; the hard negative is the
    next question's passage."""
    groups = [WORDS[i : i + 5] for i in range(0, 60, 5)]
    passages = [" ".join(g[2:]) for g in groups]
    return [Example(" ".join(g[:2]), passages[i], (passages[(i + 1) % len(passages)],)) for i, g in enumerate(groups)]


def test_batches_never_repeat_a_passage_or_a_question_and_keep_every_example() -> None:
    ex = [Example(f"q{i}", f"p{i % 4}") for i in range(12)] + [Example("q0", "p9")]
    plan = batches(ex, 5, random.Random(3))
    assert sorted((e.query, e.positive) for b in plan for e in b) == sorted((e.query, e.positive) for e in ex)
    assert max(len(b) for b in plan) <= 5
    assert all(len({e.positive for e in b}) == len(b) and len({e.query for e in b}) == len(b) for b in plan)
    assert batches(ex, 5, random.Random(3)) == plan  # seeded


def found_first(model: str, data: list[Example]) -> float:
    """The share of questions whose nearest passage (cosine) is their own."""
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(model, device="cpu")
    q = m.encode([e.query for e in data], normalize_embeddings=True)
    p = m.encode([e.positive for e in data], normalize_embeddings=True)
    return float(np.mean((q @ p.T).argmax(axis=1) == np.arange(len(data))))


def test_training_moves_questions_towards_their_passages(tiny_embedding_model: Path, tmp_path: Path) -> None:
    data, out = examples(), tmp_path / "tuned"
    steps: list[tuple[int, int]] = []
    config = TrainConfig(epochs=30, learning_rate=3e-3, batch_size=4)
    stats = fine_tune(str(tiny_embedding_model), data, out, config, progress=lambda s, n: steps.append((s, n)))
    assert stats.steps == 90
    assert steps[-1] == (90, 90)
    assert len(steps) == 90
    assert stats.last_loss < stats.first_loss / 2
    # the questions share no word with their passages: only training links them (1 in 12 by chance before)
    assert found_first(str(tiny_embedding_model), data) < 0.25
    assert found_first(str(out), data) == 1.0


def test_the_tuned_folder_is_served_by_onnx_as_by_torch(tiny_embedding_model: Path, tmp_path: Path) -> None:
    from service.retrieval.embedding import SentenceTransformerEmbedder
    from service.retrieval.onnx_models import OnnxEmbedder

    out = tmp_path / "tuned"
    fine_tune(str(tiny_embedding_model), examples(), out, TrainConfig(epochs=1, batch_size=4))
    onnx = OnnxEmbedder(str(out), cache=tmp_path / "cache", name="tuned:t1")
    torch = SentenceTransformerEmbedder(str(out), name="tuned:t1")
    assert onnx.name == torch.name == "tuned:t1"
    assert onnx.dimension == torch.dimension == 32
    texts = [e.positive for e in examples()]
    np.testing.assert_allclose(onnx.embed_documents(texts), torch.embed_documents(texts), atol=1e-4)


def test_a_stop_asked_by_progress_saves_nothing_and_no_example_is_refused(
    tiny_embedding_model: Path, tmp_path: Path
) -> None:
    def stop(_step: int, _steps: int) -> None:
        raise InterruptedError("cancelled")

    with pytest.raises(InterruptedError):
        fine_tune(str(tiny_embedding_model), examples(), tmp_path / "a", TrainConfig(), progress=stop)
    assert not (tmp_path / "a").exists()
    with pytest.raises(ValueError, match="no training example"):
        fine_tune(str(tiny_embedding_model), [], tmp_path / "b", TrainConfig())

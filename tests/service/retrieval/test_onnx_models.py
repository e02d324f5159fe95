"""The models on ONNX Runtime against the same models on torch (sentence-transformers): equal scores, a cached
export, and a refused one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from service.errors import PlumblineError
from service.retrieval import onnx_models
from service.retrieval.embedding import Embedder, SentenceTransformerEmbedder
from service.retrieval.onnx_models import OnnxCrossEncoder, OnnxEmbedder
from service.retrieval.rerank import CrossEncoderReranker, TorchCrossEncoder
from service.runtime import build_embedder, build_reranker, model_device
from service.settings import PACKAGED_MODEL, Settings

TEXTS = [
    "refund window",
    "How do I reset my password if I lost my phone?",
    "Für Rückerstattungen gilt eine Frist von 30 Tagen.",
    "vpn " * 400,  # past the model's 256 tokens: cut the same way
    "",
]


def _onnx(model: Path, cache: Path, *, max_tokens: int = 256, int8: bool = False) -> CrossEncoderReranker:
    """A reranker on the cross-encoder at `model`, run by ONNX Runtime."""
    return CrossEncoderReranker(OnnxCrossEncoder(str(model), cache=cache, max_tokens=max_tokens, int8=int8))


@pytest.fixture(scope="module")
def torch_minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(PACKAGED_MODEL)


def test_onnx_embeddings_equal_sentence_transformers(
    minilm: Embedder, torch_minilm: SentenceTransformerEmbedder
) -> None:
    assert isinstance(minilm, OnnxEmbedder)  # the suite runs on what the service runs by default
    assert minilm.dimension == torch_minilm.dimension == 384
    for embed, want in [
        (minilm.embed_documents, torch_minilm.embed_documents),
        (minilm.embed_queries, torch_minilm.embed_queries),
    ]:
        got = embed(TEXTS)
        assert got.shape == (len(TEXTS), 384)
        assert np.abs(got - want(TEXTS)).max() < 1e-5
    assert minilm.embed_queries([]).shape == (0, 384)


def test_onnx_cross_encoder_scores_equal_sentence_transformers(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    onnx = _onnx(tiny_cross_encoder, tmp_path)
    torch = CrossEncoderReranker(TorchCrossEncoder(str(tiny_cross_encoder)))
    passages = ["the vpn error code", "refund plan price", "laptop", "a b c d e f g h"]
    assert onnx.score("vpn error", passages) == pytest.approx(torch.score("vpn error", passages), abs=1e-5)
    assert onnx.score("q", []) == []
    # a passage longer than max_tokens is cut and the query kept whole: the score is that of the cut passage
    short = _onnx(tiny_cross_encoder, tmp_path, max_tokens=16)
    long = "vpn " * 100
    assert short.score("vpn error code", [long]) == pytest.approx(short.score("vpn error code", ["vpn " * 11]))


def test_pairs_run_in_batches_by_length_and_keep_their_order(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    onnx = _onnx(tiny_cross_encoder, tmp_path)
    passages = ["vpn " * n + "error code" for n in (1, 40, 3, 90, 7, 2, 60, 5, 11)]  # three batches, lengths mixed
    alone = [onnx.score("vpn error", [p])[0] for p in passages]
    assert len(set(alone)) == len(passages)
    assert onnx.score("vpn error", passages) == pytest.approx(alone, abs=1e-6)


def test_the_export_is_cached_and_checked(
    tiny_cross_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    OnnxCrossEncoder(str(tiny_cross_encoder), cache=tmp_path)
    [exported] = list(tmp_path.glob("*.onnx"))
    calls: list[Path] = []
    monkeypatch.setattr(onnx_models, "_export", lambda *a: calls.append(a[2]))
    OnnxCrossEncoder(str(tiny_cross_encoder), cache=tmp_path)
    assert calls == []  # loaded, not exported again
    monkeypatch.undo()
    # an export that disagrees with torch is refused, and nothing is left in the cache
    other = tmp_path / "strict"
    monkeypatch.setattr(onnx_models, "_TOLERANCE", -1.0)
    with pytest.raises(PlumblineError, match=r"differs from torch.*PLUMBLINE_ENCODER_RUNTIME=torch"):
        OnnxCrossEncoder(str(tiny_cross_encoder), cache=other)
    assert list(other.iterdir()) == []
    assert exported.exists()


def test_settings_choose_the_runtime(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    onnx = Settings(data_dir=tmp_path, rerank_model=str(tiny_cross_encoder), device="cpu", model_cache=tmp_path / "m")
    on_onnx = build_reranker(onnx)
    assert isinstance(on_onnx, CrossEncoderReranker)
    assert isinstance(on_onnx.scorer, OnnxCrossEncoder)
    torch = onnx.model_copy(update={"encoder_runtime": "torch"})
    on_torch = build_reranker(torch)
    assert isinstance(on_torch, CrossEncoderReranker)
    assert isinstance(on_torch.scorer, TorchCrossEncoder)
    assert isinstance(build_embedder(torch), SentenceTransformerEmbedder)
    assert model_device(onnx) == "cpu"
    # the rerank window is on by default: a long passage is scored cut around "vpn error", not at its end
    passage = "plan\n\n" + "the a of to and in is " * 6 + "vpn error code " + "laptop leave " * 12
    short = {"rerank_max_tokens": 24}
    focused = build_reranker(onnx.model_copy(update=short))
    at_end = build_reranker(onnx.model_copy(update={**short, "rerank_focus": False}))
    assert focused is not None
    assert at_end is not None
    cut = _onnx(tiny_cross_encoder, tmp_path / "m", max_tokens=24)
    assert at_end.score("vpn error", [passage]) == cut.score("vpn error", [passage])
    assert focused.score("vpn error", [passage]) != cut.score("vpn error", [passage])  # exact: see test_rerank.py


def _threads() -> dict[int, tuple[int, int]]:
    """Each thread of this process: its nice value and the CPU time it has used, in clock ticks (/proc/self/task)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 on
        out[int(tid)] = (int(fields[16]), int(fields[11]) + int(fields[12]))
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread priority is Linux's")
def test_documents_are_embedded_at_low_priority_in_a_session_of_their_own(tmp_path: Path) -> None:
    before = _threads()
    settings = Settings(data_dir=tmp_path, device="cpu", model_cache=Path(os.environ["PLUMBLINE_MODEL_CACHE"]))
    embedder = build_embedder(settings.model_copy(update={"ingest_nice": 7, "torch_threads": 2}))
    new = {tid: nice for tid, (nice, _) in _threads().items() if tid not in before}
    # the worker thread and the session's own worker, started from it; the query session's stays at 0
    niced = [tid for tid, nice in new.items() if nice == 7]
    assert len(niced) == 2
    assert 0 in new.values()
    used = sum(_threads()[tid][1] for tid in niced)
    vectors = embedder.embed_documents(TEXTS * 20)
    assert sum(_threads()[tid][1] for tid in niced) > used  # the work ran there
    assert _threads().keys() - before.keys() == new.keys()  # no thread per call
    assert np.abs(vectors[: len(TEXTS)] - embedder.embed_queries(TEXTS)).max() < 1e-6  # no prefixes here
    shared = build_embedder(settings.model_copy(update={"ingest_nice": 0}))
    assert [tid for tid, (nice, _) in _threads().items() if tid not in before and nice] == niced
    assert np.abs(shared.embed_documents(TEXTS) - vectors[: len(TEXTS)]).max() < 1e-6


def test_cuda_without_a_gpu_is_a_start_up_error(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(PlumblineError, match="PLUMBLINE_DEVICE=cuda but torch sees no GPU"):
        model_device(Settings(data_dir=tmp_path, device="cuda"))
    assert model_device(Settings(data_dir=tmp_path, device="auto")) == "cpu"


def test_an_int8_cross_encoder_is_a_graph_of_its_own_and_ranks_alike(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    exact = _onnx(tiny_cross_encoder, tmp_path)
    small = _onnx(tiny_cross_encoder, tmp_path, int8=True)
    assert len(list(tmp_path.glob("*.onnx"))) == 2
    passages = ["the vpn error code", "refund plan price", "laptop", "a b c d e f g h"]
    assert small.score("vpn error", passages) == pytest.approx(exact.score("vpn error", passages), abs=0.05)

"""Write demo/handbook.embeddings.npz: the handbook's chunk embeddings under the default settings, which `make run`
adds to the embedding cache (PLUMBLINE_EMBEDDING_SEED) so that its first start does not run the model over every
chunk. `tests/service/retrieval/test_embedding_cache.py` fails when the file no longer covers the handbook."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.retrieval.embedding_cache import CachedEmbedder  # noqa: E402
from service.runtime import Runtime  # noqa: E402
from service.settings import Settings  # noqa: E402

SEED = ROOT / "demo" / "handbook.embeddings.npz"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Runtime(Settings(data_dir=Path(tmp), auth="off"), preload=(ROOT / "demo" / "handbook",))
        runtime.warm_up()
        cache = runtime.index.embedder
        assert isinstance(cache, CachedEmbedder)
        cache.export(SEED)
        runtime.close()
    print(f"wrote {SEED.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

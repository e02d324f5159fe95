"""Retrieval: a query in, ranked hits out. Tokenizer and BM25 vectors, the embedding models and their cache (torch or
ONNX Runtime), the cross-encoder rerank, fusion, the engine-side half of a search (`gather`: candidates, committed
generations, rescoring) and `SearchPipeline`, which composes them.

May import: the foundations (`service.settings`, `domain`, `errors`, `filters`), `service.stores` and `service.infra`.
Never the index's write path, evaluation, access, the API or the CLI.
"""

"""The index's write side and its upkeep: documents parsed (`parsing`), chunked on their structure (`chunking`),
loaded from folders or BEIR files (`loaders`), written as generations with a head per document (`index.Index`),
superseded by newer ones (`supersession`), checked and repaired (`integrity`), upgraded from older payload schemas
(`upgrade`), and exported or imported whole (`transfer`).

May import: the foundations, `service.retrieval` (tokenizer, BM25, embedding), `service.stores`, `service.state`
(for transfer) and `service.infra`. Never evaluation, access, the API or the CLI.
"""

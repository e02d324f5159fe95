"""Plumbline, the service: hybrid retrieval that measures itself.

One subpackage per job, in layers: a package imports only from the lines below its own (`tests/test_layout.py`
checks it; `eval/`, the evaluation library, imports nothing from here):

    api/, cli/          HTTP; the `plumbline` command (only `plumbline serve` reaches into api/, to build the app)
    application/        each use case as a caller may make it
    runtime             the composition root
    evaluation/         runs, gauges, schedule, incidents, triage
    index/              the write side: parse, chunk, load, Index, supersession, integrity, upgrade, transfer
    access/             principals and API keys
    retrieval/          tokenizer, BM25, models, rerank, fusion, gather, SearchPipeline
    settings            configuration
    stores/             the vector-store contract, its payload schema and adapters
    state/              the state store
    options             what a search or a run is asked for
    filters             request filters and the engine-neutral condition tree
    inputs, infra/      input validation; logs, metrics, lock, atomic files, kill points
    errors, domain      domain errors and data types
    eval                the evaluation library

- `settings`, `domain`, `errors`, `filters`, `inputs`, `options`: the foundations every job shares (configuration,
  the frozen data types, the domain errors, request filters and the engine-neutral condition tree, the input models
  every way in validates alike, and the options a search or an eval run is asked for).
- `runtime`: the composition root: builds every component from `Settings` (the server, the CLI and the benchmarks
  all wire the service through it).
- `retrieval/`, `index/`, `evaluation/`, `access/`, `state/`, `stores/`, `infra/`: the jobs; see each `__init__`.
- `application/`: each use case as a caller may make it (tenant confinement and the roles a request's details need).
- `api/`: HTTP only (request model → options → application service → response model); nothing outside it imports
  it. `cli/`: the `plumbline` command. `web/`: the page's static files.
"""

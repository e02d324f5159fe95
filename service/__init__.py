"""Plumbline, the service: hybrid retrieval that measures itself.

One subpackage per job; the arrows say what each may import (nothing imports upward, and `eval/` imports nothing
from here):

    api/ ──► application/ ──► evaluation/ ──► index/ ──► retrieval/ ──► stores/ ──► the foundations
    api/, cli/ ──► runtime      │   access/ ──► state/ ──► infra/
                                └──► eval/ (the evaluation library)

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

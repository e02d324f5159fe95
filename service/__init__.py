"""Plumbline, the service: hybrid retrieval that measures itself.

One subpackage per job; the arrows say what each may import (nothing imports upward, and `eval/` imports nothing
from here):

    api/ ──► runtime ──► evaluation/ ──► index/ ──► retrieval/ ──► stores/ ──► filters, domain, errors, settings
    cli/ ──► runtime        │              access/ ──► state/ ──► infra/
                            └──► eval/ (the evaluation library)

- `settings`, `domain`, `errors`, `filters`: the foundations every job shares (configuration, the frozen data types,
  the domain errors, request filters and the engine-neutral condition tree).
- `runtime`: the composition root: builds every component from `Settings` (the server, the CLI and the benchmarks
  all wire the service through it).
- `retrieval/`, `index/`, `evaluation/`, `access/`, `state/`, `stores/`, `infra/`: the jobs; see each `__init__`.
- `api/`: HTTP only; nothing outside it imports it. `cli/`: the `plumbline` command. `web/`: the page's static files.
"""

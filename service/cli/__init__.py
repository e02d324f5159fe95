"""The `plumbline` command (`main`), one module per command group: `ingest`, `incidents`, `keys`, `transfer`; `common`,
what they share (exit codes, `--data-dir`); and `remote`, the HTTP client the commands with `--url` use
(`HttpRetriever` replays a set through a remote `/search`).

May import: everything but `service.api` (a command that serves builds the app through `service.api.app`'s factory,
the one exception, in `main._serve`).
"""

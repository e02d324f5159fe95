"""Plumbing every job shares, with no domain knowledge: log lines and request ids (`logs`), Prometheus metrics
(`observability`), the data directory's lock (`datadir`), files replaced atomically (`files`) and the named kill
points of the crash tests (`faults`).

May import: `service.errors` only.
"""

"""The application layer: each use case as a caller may make it. A service takes plain options (`service.options`)
and the caller (`service.access.principals.Principal`), confines a tenant-bound key to its tenant (another tenant's
documents, runs and incidents read as absent), checks the roles a request's details need, and calls the jobs below.
The API's routes are request model → options → a call here → response model.

May import: the foundations, `service.access`, `service.retrieval`, `service.index`, `service.evaluation`,
`service.stores` and the `eval` library. Never the API or the CLI.
"""

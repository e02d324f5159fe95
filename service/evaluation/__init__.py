"""Evaluation as a service: the labelled sets replayed through the live pipeline (`retriever`), runs in the
foreground or background with slots, leases, progress and cancel (`runs.EvalService`), the eval gauges (`gauges`),
the scheduler of monitoring runs (`schedule`), failed-answer incidents (`incidents`) and their triage (`triage`).

May import: the `eval` library, the foundations, `service.retrieval`, `service.index`, `service.stores`,
`service.state` and `service.infra`. Never the API or the CLI.
"""

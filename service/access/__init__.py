"""Access control: who is calling (`principals`: roles, `Principal`, tenant confinement) and the API keys that say
so (`keys`: the token format, hashes at rest, the `Authenticator`, create/rotate/revoke).

May import: the foundations and `service.state` (key records). Never retrieval, evaluation, the API or the CLI.
"""

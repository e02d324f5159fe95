"""The state store (SQLAlchemy 2; SQLite by default, PostgreSQL by URL). See `service.state.store`."""

from service.state.store import StateStore, StateUnavailable, open_state

__all__ = ["StateStore", "StateUnavailable", "open_state"]

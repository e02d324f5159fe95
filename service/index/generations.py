"""Index generations: the live embedded index and the ones `plumbline tune` builds beside it with another model.

A generation is an index directory and the embedding model that made its vectors (the index's manifest records the
model too, and refuses to open, or take a write, under another: vectors of two models never mix in one index). The
first is `<data dir>/index` with the configured model (`base`). A tune writes its model to
`<data dir>/models/tuned/<name>/` and its index to `<data dir>/generations/<name>/index`. Which one is served, and
the one before it (a rollback's target), are in `<data dir>/serving.json`, replaced whole (`write_atomic`): a crash
leaves the old choice or the new one. At most the served, the previous and one candidate generation are kept.

Switching generations copies what changed in the live index since the other was built (`sync`), so nothing
acknowledged is lost: the last changes are copied with the live index's writes held (`Index.held`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from service.errors import Conflict
from service.filters import FilterSpec, build_filter
from service.index.index import Index
from service.index.loaders import batched
from service.infra.files import write_atomic
from service.stores.payload import DocumentEntry

log = logging.getLogger("plumbline")

SERVING = "serving.json"
BASE = "base"
TUNED_PREFIX = "tuned:"  # a tuned model's name, as the index manifest and the embedding cache record it
COPY_BATCH = 64  # documents copied per ingest


@dataclass(frozen=True)
class Generation:
    """An index directory (relative to the data directory) and the model that made its vectors."""

    name: str
    model: str
    index_dir: str
    created_at: str = ""
    tune: str | None = None  # the tune that made it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Generation:
        return cls(
            str(obj["name"]), str(obj["model"]), str(obj["index_dir"]), str(obj.get("created_at", "")), obj.get("tune")
        )


class Generations:
    """The generations of one data directory, and which is served."""

    def __init__(self, data_dir: Path, configured_model: str) -> None:
        self.data_dir = data_dir
        self.base = Generation(BASE, configured_model, "index")

    @property
    def _pointer(self) -> Path:
        return self.data_dir / SERVING

    def _read(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self._pointer.read_text()))
        except FileNotFoundError:
            return {}

    def _of(self, found: dict[str, Any] | None) -> Generation | None:
        """A recorded generation; the base always with the configured model (it may have changed since)."""
        if not found:
            return None
        return self.base if found["name"] == BASE else Generation.of(found)

    def serving(self) -> Generation:
        """The served generation: the last one switched to, else the base."""
        return self._of(self._read().get("serving")) or self.base

    def previous(self) -> Generation | None:
        """The generation served before the current one: what a rollback returns to."""
        return self._of(self._read().get("previous"))

    def history(self) -> list[dict[str, Any]]:
        return list(self._read().get("history", []))

    def new(self, name: str, tune: str | None) -> Generation:
        """A candidate generation's record (its directories are made by whoever builds it)."""
        return Generation(name, TUNED_PREFIX + name, f"generations/{name}/index", _now(), tune)

    def model_dir(self, model: str) -> Path | None:
        """The folder of a tuned model (`tuned:<name>`), None for any other name."""
        if not model.startswith(TUNED_PREFIX):
            return None
        return self.tuned_model_dir(model.removeprefix(TUNED_PREFIX))

    def tuned_model_dir(self, name: str) -> Path:
        """Where generation `name`'s tuned model is saved."""
        return self.data_dir / "models" / "tuned" / name

    def index_path(self, generation: Generation) -> Path:
        return self.data_dir / generation.index_dir

    def switch(self, to: Generation, *, reason: str) -> None:
        """Serve `to` from now on (the served one becomes the previous), recorded whole in one rename."""
        old = self._read()
        current = self.serving()
        history = [*old.get("history", []), {"at": _now(), "from": current.name, "to": to.name, "reason": reason}]
        record = {"serving": to.to_json(), "previous": current.to_json(), "history": history[-50:]}
        write_atomic(self._pointer, json.dumps(record, indent=2) + "\n", crash_at="generations:pointer-written")

    def prune(self, keep: set[str]) -> list[str]:
        """Remove the tuned generations (index and model) other than those named in `keep` and those served or
        previous; the names removed."""
        keep = keep | {self.serving().name} | ({p.name} if (p := self.previous()) else set())
        removed = []
        for root in (self.data_dir / "generations", self.data_dir / "models" / "tuned"):
            for path in sorted(root.iterdir()) if root.is_dir() else ():
                if path.name not in keep:
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path.name)
        return sorted(set(removed))

    def check_served(self, generation: Generation) -> None:
        """`Conflict` when `generation` is a tuned one whose files are gone."""
        folder = self.model_dir(generation.model)
        if folder is not None and not (folder / "modules.json").exists():
            raise Conflict(f"generation {generation.name}'s model is missing from {folder}: roll back")


def _now() -> str:
    """When a generation was made or switched to: UTC to the second, `Z`."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def entries(index: Index, tenant: str | None = None) -> Iterator[DocumentEntry]:
    """Every committed document of `index` (of `tenant`, if given), in the engine's order."""
    where = build_filter(FilterSpec(tenant=tenant), fresh_only=False, now=dt.datetime.now(dt.UTC))
    cursor = None
    while True:
        found, cursor = index.listing(where, cursor, COPY_BATCH)
        yield from found
        if cursor is None:
            return


def sync(
    source: Index, target: Index, known: dict[str, int] | None = None, beat: Callable[[], None] = lambda: None
) -> tuple[dict[str, int], dict[str, int]]:
    """Make `target` hold the documents `source` holds: each document whose committed generation in `source` is not
    the one `known` records (None: every document) is ingested into `target` (which skips one whose content it
    already holds), and each document `target` holds that `source` does not is deleted. `beat()` after each batch.
    The source's generations by document (the next call's `known`), and the counts checked, written and deleted."""
    seen: dict[str, int] = {}
    stale: list[str] = []
    written = 0
    for group in batched(entries(source), COPY_BATCH):
        seen.update((e.id, e.generation) for e in group)
        stale += [e.id for e in group if known is None or known.get(e.id) != e.generation]
    for ids in batched(stale, COPY_BATCH):
        result = target.ingest([source.get(i).document for i in ids])
        written += result.documents - result.unchanged
        beat()
    gone = [e.id for e in entries(target) if e.id not in seen]
    for doc_id in gone:
        target.delete(doc_id)
    return seen, {"checked": len(stale), "written": written, "deleted": len(gone)}

"""Files replaced whole: a crash (SIGKILL, power cut) leaves the old content or the new, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from service.infra.faults import crash_point


def write_atomic(
    path: Path, data: str | bytes, *, sync: bool = True, crash_at: str | None = "state:temp-written"
) -> None:
    """Write `data` (text as UTF-8) to a temporary file beside `path` and rename it over `path`; with `sync` (the
    default) the file and then the rename are on disk before it returns. `crash_at` names the kill point between the
    two (`service.infra.faults`).

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "sub" / "keys.json"
        >>> write_atomic(target, "[]\\n", sync=False)
        >>> target.read_text(), [p.name for p in target.parent.iterdir()]
        ('[]\\n', ['keys.json'])
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        if crash_at:
            crash_point(crash_at)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

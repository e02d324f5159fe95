"""One process per data directory: our own lock file, taken before anything opens the engine or writes state.

The engine's own lock is not enough: a second process that merely tries to open a served directory has
truncated the engine's journal and broken the first server's writes. So every entry point (`serve`,
in-process `ingest` and `eval run`, `doctor`) takes `DataDirLock` first, and a refused process touches
nothing: it only opens the lock file, which it never writes.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from service.errors import DataDirLocked, DataDirUnavailable

LOCK_FILE = "plumbline.lock"


class DataDirLock:
    """An exclusive `flock` on `<data dir>/plumbline.lock`, held until `release()` or the process ends.

    Example:
        >>> lock = DataDirLock(Path(tempfile.mkdtemp()))  # doctest: +SKIP
        >>> lock.acquire(); DataDirLock(lock.data_dir).acquire()  # doctest: +SKIP
        Traceback (most recent call last):
        service.errors.DataDirUnavailable: the data directory ... is in use by another Plumbline process (pid ...)
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (a no-op if held); raise `DataDirLocked` if another process holds it, or
        `DataDirUnavailable` saying why the directory cannot be used (e.g. a read-only file system)."""
        if self._fd is not None:
            return
        path = self.data_dir / LOCK_FILE
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirUnavailable(
                f"cannot use the data directory {self.data_dir}: {exc.strerror or exc}; it must be a writable directory"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLocked(
                f"the data directory {self.data_dir} is in use by another Plumbline process (pid {owner}); "
                "stop that process first, or give this one another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

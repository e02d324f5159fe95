"""Files replaced whole (`service.infra.files.write_atomic`): the old content or the new, and no temporary left."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.infra.files import write_atomic


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_write_atomic_creates_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "f.txt"
    write_atomic(target, "one\n")
    assert target.read_text(encoding="utf-8") == "one\n"
    write_atomic(target, "two — 二\n")
    assert target.read_bytes() == "two — 二\n".encode()
    assert leftovers(target.parent) == []


def test_write_atomic_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"old content\r\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "half written \ud800")  # a lone surrogate cannot be encoded: fails mid-write
    assert target.read_bytes() == b"old content\r\n"
    assert leftovers(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_bytes_without_sync(tmp_path: Path) -> None:
    target = tmp_path / "index-writes.log"
    write_atomic(target, b"\x80\x05call", sync=False, crash_at=None)
    assert target.read_bytes() == b"\x80\x05call"
    assert leftovers(tmp_path) == []

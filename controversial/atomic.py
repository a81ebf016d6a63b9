"""Atomic file writes: a file either appears complete or not at all, even under kill -9."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", private: bool = False, **open_kwargs) -> Iterator[IO]:
    """Open a temp file next to ``path``; on clean exit fsync it and rename it over ``path``. ``private``:
    readable by the owner only (mode 0600), for files that hold personal data or secrets."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    if not private:
        os.chmod(tmp_name, 0o666 & ~_UMASK)  # mkstemp's 0600 would make shared outputs unreadable
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def fsync_tree(folder: str | os.PathLike, recursive: bool = True) -> None:
    """Flush ``folder``'s files and folders (only the folder itself unless ``recursive``) to disk, so a folder
    renamed into place afterwards holds every byte even after a power cut, not only after a kill."""
    paths = [Path(folder)]
    if recursive:
        paths += sorted(Path(folder).rglob("*"))
    for path in reversed(paths):  # the contents before the folders that list them
        if path.is_symlink():
            continue
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)

"""Names and paths read from files that others may have written (manifests, run settings, checkpoints, model files,
bundles): a name that becomes a file name must be one plain file-name component, and a path read from a record
must stay inside the folder it is relative to, symlinks resolved. One rule for every reader and writer, so a
collaborator's file can neither write nor read outside the folders the user named (``docs/human_study.md``,
section 8, "Files from collaborators")."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from controversial.errors import UserError

MAX_NAME = 200  # characters; file systems allow 255 bytes for a whole name, which adds prefixes and suffixes


def safe_component(name: object, what: str) -> str:
    """``name`` if it can be part of a file name as it is: not empty, no ``/`` or ``\\``, no control character,
    not ``.`` or ``..``, not starting with ``.`` (hidden) or ``-`` (an option to many tools), at most
    ``MAX_NAME`` characters. Else a ``UserError`` naming ``what`` (e.g. the file and column it came from)."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > MAX_NAME
        or name[0] in ".-"
        or any(c in "/\\" or unicodedata.category(c)[0] == "C" for c in name)
    ):
        raise UserError(
            f"{what}: {name!r} cannot be used as a name: it becomes part of a file name, so it must be 1-{MAX_NAME} "
            "characters with no '/', '\\' or control character, not starting with '.' or '-'"
        )
    return name


def inside(folder: str | os.PathLike, relative: str | os.PathLike, what: str) -> Path:
    """``folder / relative`` with symlinks resolved, refused (``UserError`` naming ``what``) unless it is inside
    ``folder`` (itself resolved): an absolute path, ``..`` or a symlink leading elsewhere is refused."""
    base = Path(folder).resolve()
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        raise UserError(
            f"{what}: {str(relative)!r} leads outside {base} (to {target}); a path read from a record must name a "
            "file inside the folder the record is in"
        )
    return target

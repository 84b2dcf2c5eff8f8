"""A disk cache for the one expensive thing computed per vocabulary: BPE's packed merge table.

Building it costs most of a load (150k merges looked up three times each, or every split of every tiktoken
token); reading it back is two array reads and one dict build. Files are named by the SHA-256 of the source
file plus the build parameters, hold only integers (no pickle, nothing executable) and are written
atomically. The directory is $TOKWORKER_CACHE_DIR, else ~/.cache/tokworker; "off" disables the cache, and
a directory that cannot be written is simply not used.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from array import array
from pathlib import Path

_FORMAT = b"tokworker-pairs-1\n"
_LIMIT = 64 * 1024 * 1024           # bytes; a larger file is not a merge table of ours


def cache_dir() -> Path | None:
    configured = os.environ.get("TOKWORKER_CACHE_DIR")
    if configured == "off":
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "tokworker"


def digest(source: bytes, *parameters) -> str:
    """Names a table: the source file's bytes and everything else the table depends on."""
    hasher = hashlib.sha256(_FORMAT)
    hasher.update(source)
    hasher.update(repr(parameters).encode())
    return hasher.hexdigest()


def pair_table(name: str, build, consistent) -> dict[int, int]:
    """The table cached under `name` if `consistent(table)` accepts it, else `build()` (then stored)."""
    directory = cache_dir()
    path = directory / f"{name}.pairs" if directory is not None else None
    if path is not None:
        table = _read(path)
        if table is not None and consistent(table):
            return table
    table = build()
    if path is not None:
        _write(path, table)
    return table


def _read(path: Path) -> dict[int, int] | None:
    try:
        if path.stat().st_size > _LIMIT:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(_FORMAT):
        return None
    numbers = array("Q")
    try:
        numbers.frombytes(data[len(_FORMAT):])
    except ValueError:
        return None
    half = len(numbers) // 2
    if len(numbers) % 2:
        return None
    return dict(zip(numbers[:half], numbers[half:]))


def _write(path: Path, table: dict[int, int]) -> None:
    numbers = array("Q", table.keys())
    numbers.extend(table.values())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as handle:
            handle.write(_FORMAT)
            handle.write(numbers.tobytes())
        os.replace(handle.name, path)
    except OSError:
        try:
            os.unlink(handle.name)
        except (OSError, UnboundLocalError):
            pass

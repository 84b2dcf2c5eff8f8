"""A disk cache for what is expensive to compute per vocabulary: BPE's packed merge table (and the small
per-symbol tables bpe_chars derives from it), Unigram's trie, and split patterns translated to tokenizers'
Unicode tables.

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
_TABLES_FORMAT = b"tokworker-tables-1\n"
_TEXT_FORMAT = b"tokworker-text-1\n"
_ARRAYS_FORMAT = b"tokworker-arrays-1\n"
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


def int_tables(name: str, build, count: int) -> list[dict[int, int]]:
    """`count` int -> int dicts cached together under `name` (see pair_table), else `build()` (then stored)."""
    directory = cache_dir()
    path = directory / f"{name}.tables" if directory is not None else None
    if path is not None:
        tables = _read_tables(path, count)
        if tables is not None:
            return tables
    tables = build()
    if path is not None:
        numbers = array("Q", [len(table) for table in tables])
        for table in tables:
            numbers.extend(table.keys())
            numbers.extend(table.values())
        _write_bytes(path, _TABLES_FORMAT + numbers.tobytes())
    return tables


def text(name: str, build) -> str:
    """A string cached under `name` (a translated split pattern), else `build()` (then stored)."""
    directory = cache_dir()
    path = directory / f"{name}.text" if directory is not None else None
    if path is not None:
        data = _read_bytes(path)
        if data is not None and data.startswith(_TEXT_FORMAT):
            try:
                return data[len(_TEXT_FORMAT):].decode("utf-8")
            except UnicodeDecodeError:
                pass
    value = build()
    if path is not None:
        _write_bytes(path, _TEXT_FORMAT + value.encode("utf-8"))
    return value


def arrays(name: str, build, typecodes: str) -> list[array]:
    """Number arrays of the given typecodes ("q" integers, "d" floats) cached together under `name`, else
    `build()` (then stored)."""
    directory = cache_dir()
    path = directory / f"{name}.arrays" if directory is not None else None
    if path is not None:
        found = _read_arrays(path, typecodes)
        if found is not None:
            return found
    built = [array(code, values) for code, values in zip(typecodes, build())]
    if path is not None:
        sizes = array("q", map(len, built))
        _write_bytes(path, _ARRAYS_FORMAT + sizes.tobytes() + b"".join(a.tobytes() for a in built))
    return built


def _read_arrays(path: Path, typecodes: str) -> list[array] | None:
    data = _read_bytes(path)
    if data is None or not data.startswith(_ARRAYS_FORMAT):
        return None
    offset = len(_ARRAYS_FORMAT)
    sizes = array("q")
    sizes.frombytes(data[offset:offset + 8 * len(typecodes)])
    offset += 8 * len(typecodes)
    found = []
    for code, size in zip(typecodes, sizes):
        values = array(code)
        end = offset + size * values.itemsize
        if size < 0 or end > len(data):
            return None
        values.frombytes(data[offset:end])
        found.append(values)
        offset = end
    return found if offset == len(data) and len(found) == len(typecodes) else None


def _read_tables(path: Path, count: int) -> list[dict[int, int]] | None:
    data = _read_bytes(path)
    if data is None or not data.startswith(_TABLES_FORMAT):
        return None
    numbers = array("Q")
    try:
        numbers.frombytes(data[len(_TABLES_FORMAT):])
    except ValueError:
        return None
    sizes, offset, tables = numbers[:count], count, []
    if len(sizes) != count or count + 2 * sum(sizes) != len(numbers):
        return None
    for size in sizes:
        middle = offset + size
        tables.append(dict(zip(numbers[offset:middle].tolist(), numbers[middle:middle + size].tolist())))
        offset += 2 * size
    return tables


def _read_bytes(path: Path) -> bytes | None:
    try:
        if path.stat().st_size > _LIMIT:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _read(path: Path) -> dict[int, int] | None:
    data = _read_bytes(path)
    if data is None or not data.startswith(_FORMAT):
        return None
    numbers = array("Q")
    try:
        numbers.frombytes(data[len(_FORMAT):])
    except ValueError:
        return None
    half = len(numbers) // 2
    if len(numbers) % 2:
        return None
    return dict(zip(numbers[:half].tolist(), numbers[half:].tolist()))


def _write(path: Path, table: dict[int, int]) -> None:
    numbers = array("Q", table.keys())
    numbers.extend(table.values())
    _write_bytes(path, _FORMAT + numbers.tobytes())


def _write_bytes(path: Path, data: bytes) -> None:
    """Atomically, or not at all (an unwritable cache directory is simply not used)."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as handle:
            temporary = handle.name
            handle.write(data)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass

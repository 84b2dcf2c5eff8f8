"""A disk cache for what is expensive to compute per vocabulary: BPE's packed merge table (and the small
per-symbol tables bpe_chars derives from it), Unigram's pieces, scores and prefixes, and split patterns
translated to tokenizers' Unicode tables.

Building it costs most of a load (150k merges looked up three times each, or every split of every tiktoken
token); reading it back is a few array reads and one dict build. Files are named by the SHA-256 of the source
file plus the build parameters, hold only numbers and text (no pickle, nothing executable) and are written
atomically; an arrays file also carries its own name and a checksum, so a damaged, truncated or swapped
file is rebuilt, never used. The directory is $TOKWORKER_CACHE_DIR, else ~/.cache/tokworker; "off"
disables the cache, and a directory that cannot be written is simply not used. Past _DIRECTORY_LIMIT bytes
the least recently used files are deleted.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zlib
from array import array
from pathlib import Path

_FORMAT = b"tokworker-pairs-1\n"
_TABLES_FORMAT = b"tokworker-tables-1\n"
_TEXT_FORMAT = b"tokworker-text-1\n"
_ARRAYS_FORMAT = b"tokworker-arrays-2\n"
_LIMIT = 64 * 1024 * 1024           # bytes; a larger file is not a merge table of ours
_DIRECTORY_LIMIT = 512 * 1024 * 1024    # bytes of our files in the directory, least recently used go first
_SUFFIXES = (".pairs", ".tables", ".text", ".arrays")
# a strings array is joined by the first of these no string holds: NUL, then Unicode's noncharacters
_SEPARATORS = "\0\ufdd0\ufdd1\ufdd2\ufdd3\ufdd4\ufdd5\ufdd6\ufdd7\ufffe\uffff"


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


def arrays(name: str, build, typecodes: str) -> list:
    """Arrays of the given typecodes ("q" integers, "d" floats, "s" a list of strings) cached together
    under `name`, else `build()` (then stored)."""
    directory = cache_dir()
    path = directory / f"{name}.arrays" if directory is not None else None
    if path is not None:
        found = _read_arrays(path, name, typecodes)
        if found is not None:
            return found
    built = [list(values) if code == "s" else array(code, values) for code, values in zip(typecodes, build())]
    if path is not None:
        _write_arrays(path, name, typecodes, built)
    return built


def _write_arrays(path: Path, name: str, typecodes: str, built: list) -> None:
    """Header (format, name), then the payload's CRC-32 and each array's size, then the arrays."""
    blobs = [_pack_strings(values) if code == "s" else values.tobytes() for code, values in zip(typecodes, built)]
    if None in blobs:
        return
    payload = b"".join(blobs)
    sizes = [len(blob) if code == "s" else len(values) for code, blob, values in zip(typecodes, blobs, built)]
    numbers = array("q", [zlib.crc32(payload), *sizes])
    _write_bytes(path, _ARRAYS_FORMAT + name.encode() + b"\n" + numbers.tobytes() + payload)


def _pack_strings(strings: list[str]) -> bytes | None:
    """The separator, then each string followed by it; None when every separator occurs in the strings."""
    for separator in _SEPARATORS:
        joined = separator.join(strings)
        if joined.count(separator) == len(strings) - 1 or not strings:
            return (separator + (joined + separator if strings else "")).encode("utf-8", "surrogatepass")
    return None


def _unpack_strings(data) -> list[str] | None:
    try:
        text = str(data, "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    if not text:
        return None
    return text[1:].split(text[0])[:-1]


def _read_arrays(path: Path, name: str, typecodes: str) -> list | None:
    data = _read_bytes(path)
    header = _ARRAYS_FORMAT + name.encode() + b"\n"
    if data is None or not data.startswith(header):
        return None
    offset = len(header) + 8 * (1 + len(typecodes))
    numbers = array("q")
    try:
        numbers.frombytes(data[len(header):offset])
    except ValueError:
        return None
    if len(numbers) != 1 + len(typecodes) or zlib.crc32(memoryview(data)[offset:]) != numbers[0]:
        return None
    found = []
    for code, size in zip(typecodes, numbers[1:]):
        if code == "s":
            end = offset + size
            values = _unpack_strings(memoryview(data)[offset:end]) if 0 <= size and end <= len(data) else None
        else:
            values = array(code)
            end = offset + size * values.itemsize
            if 0 <= size and end <= len(data):
                values.frombytes(data[offset:end])
            else:
                values = None
        if values is None:
            return None
        found.append(values)
        offset = end
    return found if offset == len(data) else None


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
        data = path.read_bytes()
    except OSError:
        return None
    try:
        os.utime(path)                       # recently used: pruned last
    except OSError:
        pass
    return data


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
        return
    _prune(path.parent)


def _prune(directory: Path) -> None:
    """Our files in `directory` kept under _DIRECTORY_LIMIT bytes, least recently used deleted first."""
    try:
        entries = [(entry.stat().st_mtime_ns, entry.stat().st_size, entry.path) for entry in os.scandir(directory)
                   if entry.name.endswith(_SUFFIXES) and entry.is_file(follow_symlinks=False)]
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= _DIRECTORY_LIMIT:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size

"""A disk cache for what is expensive to compute per vocabulary: BPE's packed merge table (and the small
per-symbol tables bpe_chars derives from it), Unigram's pieces, scores and prefixes, and split patterns
translated to tokenizers' Unicode tables.

Building it costs most of a load (150k merges looked up three times each, or every split of every tiktoken
token); reading it back is a few array reads and one dict build. Files are named by the SHA-256 of the source
file plus the build parameters and hold only numbers and text (no pickle, nothing executable).

The cache is trusted with ids, so nothing in it is taken on faith:
- the directory ($TOKWORKER_CACHE_DIR, else ~/.cache/tokworker; "off" disables the cache) must be a real
  directory owned by this user; it is created, or kept, with mode 0700 (another owner's, or a symlink, is
  not used, and that is logged once). Files are opened relative to it, without following symlinks;
- a file must be a regular file of ours, no larger than _LIMIT (a FIFO in its place used to block a load,
  a symlink to /dev/zero to raise MemoryError);
- every file carries its kind, its own name and a CRC-32 of its contents: a damaged, truncated or swapped
  file (a split pattern of another vocabulary once changed the ids) is rebuilt, never used.
Files are written atomically; a directory that cannot be written is simply not used. Past _DIRECTORY_LIMIT
bytes the least recently used files are deleted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import stat
import zlib
from array import array
from pathlib import Path

_FORMAT = b"tokworker-cache-3\n"
_LIMIT = 64 * 1024 * 1024           # bytes; a larger file is not a table of ours
_DIRECTORY_LIMIT = 512 * 1024 * 1024    # bytes of our files in the directory, least recently used go first
_SUFFIXES = (".pairs", ".tables", ".text", ".arrays")
# a strings array is joined by the first of these no string holds: NUL, then Unicode's noncharacters
_SEPARATORS = "\0\ufdd0\ufdd1\ufdd2\ufdd3\ufdd4\ufdd5\ufdd6\ufdd7\ufffe\uffff"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_log = logging.getLogger("tokworker.cache")
_refused: set[str] = set()


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
    table = _pairs(_load(f"{name}.pairs"))
    if table is not None and consistent(table):
        return table
    table = build()
    _write(f"{name}.pairs", table)
    return table


def int_tables(name: str, build, count: int) -> list[dict[int, int]]:
    """`count` int -> int dicts cached together under `name` (see pair_table), else `build()` (then stored)."""
    tables = _tables(_load(f"{name}.tables"), count)
    if tables is not None:
        return tables
    tables = build()
    numbers = array("Q", [len(table) for table in tables])
    for table in tables:
        numbers.extend(table.keys())
        numbers.extend(table.values())
    _store(f"{name}.tables", numbers.tobytes())
    return tables


def text(name: str, build) -> str:
    """A string cached under `name` (a translated split pattern), else `build()` (then stored)."""
    data = _load(f"{name}.text")
    if data is not None:
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError:
            pass
    value = build()
    _store(f"{name}.text", value.encode("utf-8"))
    return value


def arrays(name: str, build, typecodes: str) -> list:
    """Arrays of the given typecodes ("q" integers, "d" floats, "s" a list of strings) cached together
    under `name`, else `build()` (then stored)."""
    found = _arrays(_load(f"{name}.arrays"), typecodes)
    if found is not None:
        return found
    built = [list(values) if code == "s" else array(code, values) for code, values in zip(typecodes, build())]
    blobs = [_pack_strings(values) if code == "s" else values.tobytes() for code, values in zip(typecodes, built)]
    if None not in blobs:       # each array's size, then the arrays
        sizes = [len(blob) if code == "s" else len(values) for code, blob, values in zip(typecodes, blobs, built)]
        _store(f"{name}.arrays", array("q", sizes).tobytes() + b"".join(blobs))
    return built


# ------------------------------------------------------------------ the payloads

def _pack_strings(strings: list[str]) -> bytes | None:
    """The separator, then each string followed by it; None when every separator occurs in the strings."""
    for separator in _SEPARATORS:
        joined = separator.join(strings)
        if joined.count(separator) == len(strings) - 1 or not strings:
            return (separator + (joined + separator if strings else "")).encode("utf-8", "surrogatepass")
    return None


def _unpack_strings(data) -> list[str] | None:
    try:
        decoded = str(data, "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    if not decoded:
        return None
    return decoded[1:].split(decoded[0])[:-1]


def _arrays(data: memoryview | None, typecodes: str) -> list | None:
    if data is None:
        return None
    offset = 8 * len(typecodes)
    sizes = array("q")
    try:
        sizes.frombytes(data[:offset])
    except ValueError:
        return None
    if len(sizes) != len(typecodes):
        return None
    found = []
    for code, size in zip(typecodes, sizes):
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


def _tables(data: memoryview | None, count: int) -> list[dict[int, int]] | None:
    numbers = _numbers(data)
    if numbers is None:
        return None
    sizes, offset, tables = numbers[:count], count, []
    if len(sizes) != count or count + 2 * sum(sizes) != len(numbers):
        return None
    for size in sizes:
        middle = offset + size
        tables.append(dict(zip(numbers[offset:middle].tolist(), numbers[middle:middle + size].tolist())))
        offset += 2 * size
    return tables


def _pairs(data: memoryview | None) -> dict[int, int] | None:
    numbers = _numbers(data)
    if numbers is None or len(numbers) % 2:
        return None
    half = len(numbers) // 2
    return dict(zip(numbers[:half].tolist(), numbers[half:].tolist()))


def _numbers(data: memoryview | None) -> array | None:
    numbers = array("Q")
    try:
        numbers.frombytes(data)
    except (TypeError, ValueError):
        return None
    return numbers


def _write(file_name: str, table: dict[int, int]) -> None:
    numbers = array("Q", table.keys())
    numbers.extend(table.values())
    _store(file_name, numbers.tobytes())


# ------------------------------------------------------------------ the files

def _header(file_name: str, payload) -> bytes:
    """The format, the file's own name, and a CRC-32 of what follows."""
    return _FORMAT + file_name.encode() + b"\n" + zlib.crc32(payload).to_bytes(4, "little")


def _load(file_name: str) -> memoryview | None:
    """The payload of our file `file_name`, or None (no cache, no such file, not ours, damaged)."""
    directory = _open_directory()
    if directory is None:
        return None
    try:
        data = _read(file_name, directory)
    finally:
        os.close(directory)
    if data is None:
        return None
    size = len(_header(file_name, b""))
    payload = memoryview(data)[size:]
    return payload if data[:size] == _header(file_name, payload) else None


def _read(file_name: str, directory: int) -> bytes | None:
    """A regular file of ours, whole; anything else (a symlink, a FIFO, a device, too large) is None."""
    try:
        descriptor = os.open(file_name, _OPEN_FLAGS, dir_fd=directory)
    except OSError:
        return None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > _LIMIT:
            return None
        chunks, left = [], info.st_size
        while left > 0:
            chunk = os.read(descriptor, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        os.utime(descriptor)                         # recently used: pruned last
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _store(file_name: str, payload: bytes) -> None:
    """Atomically, or not at all (an unusable cache directory is simply not used)."""
    directory = _open_directory()
    if directory is None:
        return
    temporary = f".{file_name}.{secrets.token_hex(6)}.tmp"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600,
                             dir_fd=directory)
        try:
            with os.fdopen(descriptor, "wb", closefd=False) as handle:
                handle.write(_header(file_name, payload))
                handle.write(payload)
        finally:
            os.close(descriptor)
        os.replace(temporary, file_name, src_dir_fd=directory, dst_dir_fd=directory)
        _prune(directory)
    except OSError:
        try:
            os.unlink(temporary, dir_fd=directory)
        except OSError:
            pass
    finally:
        os.close(directory)


def _open_directory() -> int | None:
    """The cache directory, opened (created with mode 0700 if missing), when it is a real directory of
    ours; its mode is set to 0700 if it was looser. None otherwise."""
    path = cache_dir()
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                            | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        if os.path.islink(path):
            _refuse(path, "is a symlink")
        return None
    try:
        info = os.fstat(directory)
        if info.st_uid == os.geteuid():
            if stat.S_IMODE(info.st_mode) & 0o077:
                os.chmod(directory, 0o700)
            return directory
        _refuse(path, f"belongs to user {info.st_uid}")
    except OSError:
        pass
    os.close(directory)
    return None


def _refuse(path: Path, why: str) -> None:
    if str(path) not in _refused:
        _refused.add(str(path))
        _log.warning("not using the cache directory %s: it %s (set TOKWORKER_CACHE_DIR to a directory of "
                     "yours, or to off)", path, why)


def _prune(directory: int) -> None:
    """Our files in the directory kept under _DIRECTORY_LIMIT bytes, least recently used deleted first."""
    try:
        entries = []
        for entry in os.scandir(directory):
            if entry.name.endswith(_SUFFIXES) and entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                entries.append((info.st_mtime_ns, info.st_size, entry.name))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= _DIRECTORY_LIMIT:
            break
        try:
            os.unlink(name, dir_fd=directory)
        except OSError:
            continue
        total -= size

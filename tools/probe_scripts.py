"""Regenerate tokworker/tokenizer/unicode_data/scripts.zlib: UnicodeScripts' script of every scalar value,
probed from the installed `tokenizers` (apart from tables.zlib: only a tokenizer using UnicodeScripts
loads it).

    python tools/probe_scripts.py            # writes the file
    python tools/probe_scripts.py --check    # exits 1 if the committed file differs from a fresh probe
"""

from __future__ import annotations

import json
import re
import sys
import zlib

import regex
import tokenizers
from tokenizers import pre_tokenizers

from probe_unicode import DATA, SCALARS, deltas, property_names, write_or_check

SCRIPTS = DATA / "scripts.zlib"


def _script_split_before(left: str, scalars: list[int]) -> set[int]:
    """The scalars c for which UnicodeScripts splits `left + c` before c, probed all at once.

    The text is `left + c` repeated over every c, in chunks (tokenizers' cost grows with the length of
    each call's text); a chunk starts with `left`, so no split there is lost to a dropped leading char."""
    splitter, found, chunk = pre_tokenizers.UnicodeScripts(), set(), 1 << 15
    for first in range(0, len(scalars), chunk):
        part = scalars[first:first + chunk]
        starts = {start for _, (start, _) in splitter.pre_tokenize_str("".join(left + chr(c) for c in part))}
        found.update(c for i, c in enumerate(part) if 2 * i + 1 in starts)
    return found


def probe_scripts() -> dict:
    """UnicodeScripts' script of every scalar value, as runs of indices into a list of names.

    UnicodeScripts only reveals whether two characters share a script, so the script is measured as a
    partition: "Any" characters (space, and what its table leaves out) never split a text, so they are the
    ones that split neither after a Latin letter nor after a Han character; the others, in code point order,
    come out as runs of one script; a run's first character set beside each class's first character says
    which class the run belongs to. Classes are named after the `regex` script most of their members have
    today (its long name: HAN, LATIN, ...): names for reading, not for matching.
    """
    scripted = sorted(_script_split_before("a", SCALARS) | _script_split_before("\u4e00", SCALARS))
    runs = [start for _, (start, _) in pre_tokenizers.UnicodeScripts().pre_tokenize_str("".join(map(chr, scripted)))]
    run_class: dict[int, int] = {}  # run index -> class (0 is Any)
    pending = list(range(len(runs)))
    while pending:  # one call per class: each pending run's first character after the new class's
        first, number = chr(scripted[runs[pending[0]]]), len(set(run_class.values())) + 1
        pairs = "".join(first + chr(scripted[runs[r]]) for r in pending)
        starts = {start for _, (start, _) in pre_tokenizers.UnicodeScripts().pre_tokenize_str(pairs)}
        run_class.update((r, number) for i, r in enumerate(pending) if 2 * i + 1 not in starts)
        pending = [r for r in pending if r not in run_class]
    klass = bytearray(0x110000)  # surrogates count as Any
    members: dict[int, list[int]] = {}
    for r, (a, b) in enumerate(zip(runs, runs[1:] + [len(scripted)])):
        members.setdefault(run_class[r], []).extend(scripted[a:b])
        for c in scripted[a:b]:
            klass[c] = run_class[r]
    names = ["ANY"] + [_script_name(members[k]) for k in sorted(members)]
    assert len(set(names)) == len(names) <= 256, names
    starts, scripts = [], []
    for run in re.finditer(rb"(.)\1*", klass, re.S):
        starts.append(run.start())
        scripts.append(run.group()[0])
    return {"probed_with": {"tokenizers": tokenizers.__version__, "regex": regex.__version__},
            "names": names, "starts": deltas(starts), "scripts": scripts}


def _script_name(members: list[int]) -> str:
    """The `regex` script (long name, listed first) most of a sample of `members` have in `regex`'s Unicode."""
    sample = "".join(chr(c) for c in members[::max(1, len(members) // 64)])
    votes = {}
    for group in property_names()["SC"]:
        votes[group[0]] = len(regex.findall(rf"\p{{sc={group[0]}}}", sample))
    return max(votes, key=votes.get)


def render_scripts(data: dict) -> bytes:
    """scripts.zlib: zlib-compressed JSON, run starts as deltas with one class index per run."""
    return zlib.compress(json.dumps(data, sort_keys=True, separators=(",", ":")).encode(), 9)


def main(argv: list[str]) -> int:
    return write_or_check({SCRIPTS: render_scripts(probe_scripts())}, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

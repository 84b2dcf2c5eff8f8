"""Regenerate tokworker/tokenizer/unicode_data/tables.zlib by probing the installed references
(UnicodeScripts' table, scripts.zlib, has its own probe: tools/probe_scripts.py).

    python tools/probe_unicode.py            # writes the file
    python tools/probe_unicode.py --check    # exits 1 if the committed file differs from a fresh probe

`tokenizers` matches Split regexes with Oniguruma and normalizes with its own (older) tables; `tiktoken`
matches with Rust's regex crate. Both differ from Python's `regex`/`unicodedata` on newer code points, so
every character class, case-fold orbit, normalization difference and predicate is measured here, in bulk,
from the libraries themselves (each probe is one call over all 1,112,064 scalar values), and shipped as
range data. Must run with the pinned references (tokenizers 0.23.3, tiktoken 0.14.0).
"""

from __future__ import annotations

import array
import bisect
import json
import re
import sys
import unicodedata
import zlib
from pathlib import Path

import regex
import tiktoken
import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers

DATA = Path(__file__).resolve().parent.parent / "tokworker" / "tokenizer" / "unicode_data"
TABLES = DATA / "tables.zlib"
MARK = "\U0010FFFF"

GENERAL_CATEGORIES = ("Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Co Cn "
                      "L M N P S Z C").split()
# atom name -> (expression probed in the reference, equivalent expression in the `regex` module or None)
PERL = {"s": (r"\s", r"\s"), "d": (r"\d", r"\d"), "w": (r"\w", r"\w"), "h": (r"\h", None)}
POSIX = "alpha digit alnum upper lower space punct cntrl graph print xdigit blank word ascii".split()


class Universe:
    """A sorted set of scalar values as one string, so that one library call probes all of them."""

    def __init__(self, scalars):
        self.scalars = array.array("I", scalars)
        self.text = self.scalars.tobytes().decode("utf-32-le")
        # positions where the next scalar is not the successor: runs of positions split there
        self.breaks = [i + 1 for i in range(len(self.scalars) - 1) if self.scalars[i + 1] != self.scalars[i] + 1]

    def boundaries(self, runs) -> list[int]:
        """(start, end) runs of positions -> [start, end, start, end, ...] scalar boundaries."""
        bounds: list[int] = []
        for start, end in runs:
            cuts = self.breaks[bisect.bisect_right(self.breaks, start):bisect.bisect_left(self.breaks, end)]
            for a, b in zip([start] + cuts, cuts + [end]):
                first, last = self.scalars[a], self.scalars[b - 1] + 1
                if bounds and bounds[-1] == first:
                    bounds[-1] = last
                else:
                    bounds += [first, last]
        return bounds

    def tokenizers_class(self, expression: str) -> list[int] | None:
        """The scalars Oniguruma (as tokenizers uses it) matches with `expression`; None if it rejects it."""
        try:
            replace = normalizers.Replace(Regex(expression), MARK)
        except Exception:
            return None
        marked = replace.normalize_str(self.text)
        assert len(marked) == len(self.text), expression
        bounds = self.boundaries(m.span() for m in regex.finditer(MARK + "+", marked))
        mark_is_member = replace.normalize_str(MARK + "\0") != MARK + "\0"
        if not mark_is_member and bounds and bounds[-1] == 0x110000:  # the marker itself, left as it was
            bounds = bounds[:-2] if bounds[-2] == 0x10FFFF else bounds[:-1] + [0x10FFFF]
        return bounds

    def tiktoken_class(self, expression: str) -> list[int] | None:
        """tiktoken only encodes matched text, so encoding the universe returns exactly the members."""
        try:
            encoding = _tiktoken_encoding(expression)
        except Exception:
            return None
        members = bytes(encoding.encode_ordinary(self.text)).decode("utf-8")
        return scalars_to_boundaries(array.array("I", members.encode("utf-32-le")))

    def positions(self, bounds: list[int]):
        """Runs of positions holding the scalars of `bounds`."""
        for a, b in zip(bounds[::2], bounds[1::2]):
            yield bisect.bisect_left(self.scalars, a), bisect.bisect_left(self.scalars, b)

    def partition(self, probe, names: list[str], expression) -> dict[str, list[int]]:
        """Members of each of several disjoint classes, in log2(len(names) + 1) probes: class i is numbered
        i + 1, and probe k matches the union of the classes whose number has bit k set."""
        codes = bytearray(len(self.scalars))
        for bit in range((len(names) + 1).bit_length()):
            chosen = [expression(n) for i, n in enumerate(names) if (i + 1) >> bit & 1]
            for a, b in self.positions(probe(self, "[" + "".join(chosen) + "]")):
                codes[a:b] = bytes(c | 1 << bit for c in codes[a:b])
        runs: dict[int, list[tuple[int, int]]] = {}
        for run in re.finditer(rb"(.)\1*", codes, re.S):
            runs.setdefault(run.group()[0], []).append(run.span())
        return {n: self.boundaries(runs.get(i + 1, [])) for i, n in enumerate(names)}

    def regex_class(self, expression: str) -> list[int]:
        compiled = regex.compile(f"(?:{expression})+")
        return self.boundaries(m.span() for m in compiled.finditer(self.text))


SCALARS = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
EVERYTHING = Universe(SCALARS)
ALL = EVERYTHING.text


def scalars_to_boundaries(scalars) -> list[int]:
    bounds: list[int] = []
    for cp in scalars:
        if bounds and bounds[-1] == cp:
            bounds[-1] = cp + 1
        else:
            bounds += [cp, cp + 1]
    return bounds


def _tiktoken_encoding(pattern: str) -> tiktoken.Encoding:
    return tiktoken.Encoding("probe", pat_str=pattern, special_tokens={},
                             mergeable_ranks={bytes([b]): b for b in range(256)})


def deltas(bounds: list[int]) -> list[int]:
    return [b - a for a, b in zip([0] + bounds, bounds)]


def symmetric_difference(a: list[int], b: list[int]) -> list[int]:
    points = sorted(set(a) ^ set(b))  # boundary lists xor: toggles cancel where both change
    return points


def property_names() -> dict[str, list[str]]:
    """General category and script names with their aliases, from the `regex` module's own tables."""
    properties = regex._regex_core.PROPERTIES
    out = {}
    for key in ("GC", "SC"):
        by_value: dict[int, list[str]] = {}
        for name, value in properties[key][1].items():
            by_value.setdefault(value, []).append(name)
        out[key] = list(by_value.values())
    return out


def probe_classes(flavor: str) -> dict:
    def probe(universe: Universe, expression: str):
        method = universe.tokenizers_class if flavor == "tokenizers" else universe.tiktoken_class
        return method(expression)

    categories = [gc for gc in GENERAL_CATEGORIES if len(gc) == 2]
    atoms = {f"gc:{k}": v for k, v in EVERYTHING.partition(probe, categories, lambda n: rf"\p{{{n}}}").items()}
    regex_exprs = {f"gc:{gc}": rf"\p{{gc={gc}}}" for gc in GENERAL_CATEGORIES}
    for gc in GENERAL_CATEGORIES:
        if len(gc) == 1:
            atoms[f"gc:{gc}"] = probe(EVERYTHING, rf"\p{{{gc}}}")
    for name, (expression, regex_expression) in PERL.items():
        atoms[f"perl:{name}"], regex_exprs[f"perl:{name}"] = probe(EVERYTHING, expression), regex_expression
    if flavor == "tokenizers":  # Oniguruma's \w outside brackets also takes No (½, ³): [\w] does not
        atoms["perl:w:bracket"], regex_exprs["perl:w:bracket"] = probe(EVERYTHING, r"[\w]"), r"\w"
        for name in POSIX:
            atoms[f"posix:{name}"] = probe(EVERYTHING, f"[[:{name}:]]")
            regex_exprs[f"posix:{name}"] = f"[[:{name}:]]"
    aliases = {}
    names = property_names()
    gc_ids = {gc.upper(): f"gc:{gc}" for gc in GENERAL_CATEGORIES}
    for group in names["GC"]:
        atom = next((gc_ids[n] for n in group if n in gc_ids), None)
        for name in group:
            if atom and name not in gc_ids and probe_accepts(flavor, name):
                aliases[name] = atom
    # Scripts only cover assigned, non-private characters (in the reference or in `regex`): probe those.
    unassigned = set(iter_scalars(atoms["gc:Cn"])) & set(iter_scalars(EVERYTHING.regex_class(r"\p{gc=Cn}")))
    private = set(iter_scalars(atoms["gc:Co"]))
    assigned = Universe(cp for cp in SCALARS if cp not in unassigned and cp not in private)
    rest = Universe(sorted(unassigned | private))
    scripts = []
    for group in names["SC"]:
        long_name = max(group, key=len)
        if long_name == "UNKNOWN" or not probe_accepts(flavor, long_name):
            continue
        scripts.append(long_name)
        for name in group:
            if name != long_name and probe_accepts(flavor, name):
                aliases[name] = f"sc:{long_name}"
    assert not probe(rest, "[" + "".join(rf"\p{{{n}}}" for n in scripts) + "]")
    covered = set()
    for name, bounds in assigned.partition(probe, scripts, lambda n: rf"\p{{{n}}}").items():
        atoms[f"sc:{name}"], regex_exprs[f"sc:{name}"] = bounds, rf"\p{{sc={name}}}"
        covered.update(iter_scalars(bounds))
    if probe_accepts(flavor, "Unknown"):  # Unknown is exactly what no other script covers
        atoms["sc:UNKNOWN"] = scalars_to_boundaries(cp for cp in SCALARS if cp not in covered)
        regex_exprs["sc:UNKNOWN"] = r"\p{sc=Unknown}"
        assert atoms["sc:UNKNOWN"] == probe(EVERYTHING, r"\p{Unknown}")
    atoms = {k: v for k, v in atoms.items() if v is not None}
    regex_diff = {k: symmetric_difference(v, regex_set(regex_exprs[k], k, assigned)) for k, v in atoms.items()
                  if regex_exprs[k]}
    return {"atoms": {k: deltas(v) for k, v in atoms.items()},
            "regex_exprs": {k: regex_exprs[k] for k in atoms},
            "regex_diff": {k: deltas(v) for k, v in regex_diff.items()},
            "aliases": aliases}


def regex_set(expression: str, atom: str, assigned: Universe) -> list[int]:
    if atom.startswith("sc:") and atom != "sc:UNKNOWN":
        return assigned.regex_class(expression)
    return EVERYTHING.regex_class(expression)


def iter_scalars(bounds: list[int]):
    for a, b in zip(bounds[::2], bounds[1::2]):
        yield from range(a, b)


def probe_accepts(flavor: str, name: str) -> bool:
    expression = rf"\p{{{name}}}"
    try:
        if flavor == "tokenizers":
            Regex(expression)
        else:
            _tiktoken_encoding(expression)
        return True
    except Exception:
        return False


def case_candidates() -> list[int]:
    cased = regex.compile(r"[\p{CWCM}\p{Cased}\p{CWCF}]")
    return [cp for cp in SCALARS if cased.match(chr(cp)) or chr(cp).lower() != chr(cp)
            or chr(cp).upper() != chr(cp) or chr(cp).casefold() != chr(cp)]


def probe_case_folds(flavor: str) -> dict:
    """Single-character case-insensitive orbits, and (tokenizers) characters with multi-character folds."""
    candidates = case_candidates()
    text = "\0".join(map(chr, candidates))
    orbits: dict[int, frozenset] = {}
    for cp in candidates:
        if cp in orbits:
            continue
        pattern = f"(?i:\\x{{{cp:X}}})"
        if flavor == "tokenizers":
            pieces = normalizers.Replace(Regex(pattern), MARK).normalize_str(text).split("\0")
            members = frozenset(c for c, piece in zip(candidates, pieces) if piece == MARK)
        else:
            matched = bytes(_tiktoken_encoding(pattern).encode_ordinary(text)).decode("utf-8")
            members = frozenset(map(ord, matched))
        members |= {cp}
        for member in members:
            orbits[member] = members
    groups = sorted({tuple(sorted(o)) for o in orbits.values() if len(o) > 1})
    multi = []
    if flavor == "tokenizers":
        for cp in candidates:
            folded = chr(cp).casefold()
            if len(folded) > 1 and tokenizers_matches(f"(?i:{regex.escape(folded)})", chr(cp)):
                multi.append([cp, folded])
    return {"orbits": [list(g) for g in groups], "multi": multi}


def tokenizers_matches(pattern: str, text: str) -> bool:
    return normalizers.Replace(Regex(pattern), "").normalize_str(text) != text


def probe_normalization() -> dict:
    """The scalars tokenizers' NFD/NFKD/NFC/NFKC treat as inert (no decomposition, combining class 0, never
    composed) although current Unicode gives them normalization behaviour.

    Normalization data is stable (decompositions and combining classes never change once assigned), so
    tokenizers' older tables differ from any newer `unicodedata` only on these: measured against this
    Python's `unicodedata`, plus everything newer that the `regex` module knows and `unicodedata` does not.
    """
    scalars = [cp for cp in SCALARS if cp != 0x0A]
    joined = "\n".join(map(chr, scalars))
    inert = set()
    for form in ("NFD", "NFKD", "NFC", "NFKC"):
        ours = getattr(normalizers, form)().normalize_str(joined).split("\n")
        reference = unicodedata.normalize(form, joined).split("\n")
        for cp, a, b in zip(scalars, ours, reference):
            if a != b:
                assert a == chr(cp), (form, hex(cp), a)  # tokenizers leaves it alone
                inert.add(cp)
    nfd = normalizers.NFD()
    for cp in scalars:
        ccc = unicodedata.combining(chr(cp))
        if not ccc:
            continue
        # reordering happens iff the mark's class is known: after an acute (230) for classes below 230,
        # before a ccc-1 overlay otherwise
        probe = "a\u0301" + chr(cp) if ccc < 230 else "a" + chr(cp) + "\u0334"
        if nfd.normalize_str(probe) != unicodedata.normalize("NFD", probe):
            inert.add(cp)
    nfc = normalizers.NFC()
    not_composed = []
    for cp in scalars:
        decomposition = unicodedata.decomposition(chr(cp))
        if not decomposition or decomposition.startswith("<"):
            continue
        parts = "".join(chr(int(h, 16)) for h in decomposition.split())
        if len(parts) == 2 and unicodedata.normalize("NFC", parts) == chr(cp) and nfc.normalize_str(parts) != chr(cp):
            not_composed.append([ord(parts[0]), ord(parts[1])])
    relevant = regex.compile(r"[\p{NFKD_QC=N}\P{ccc=0}\p{NFC_QC=M}\p{NFKC_QC=M}]")
    newer = [cp for cp in scalars if unicodedata.category(chr(cp)) == "Cn" and relevant.match(chr(cp))]
    for cp in newer:
        assert getattr(normalizers, "NFKC")().normalize_str("a" + chr(cp)) == "a" + chr(cp), hex(cp)
    inert.update(newer)
    return {"inert": deltas(scalars_to_boundaries(sorted(inert))), "not_composed": not_composed}


def gaps(pieces, text_length: int) -> list[tuple[int, int]]:
    """Positions of ALL not covered by any (piece, (start, end)) offset pair."""
    out, cursor = [], 0
    for _, (start, end) in pieces:
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < text_length:
        out.append((cursor, text_length))
    return out


def per_character(normalizer, exclude: str = "\n") -> dict[int, str]:
    """normalizer applied to each scalar alone (joined by `exclude`, which is probed on its own)."""
    scalars = [cp for cp in SCALARS if chr(cp) != exclude]
    out = normalizer.normalize_str(exclude.join(map(chr, scalars))).split(exclude)
    assert len(out) == len(scalars)
    result = dict(zip(scalars, out))
    result[ord(exclude)] = normalizer.normalize_str(exclude)
    return result


def probe_predicates() -> dict:
    whitespace = EVERYTHING.boundaries(gaps(pre_tokenizers.WhitespaceSplit().pre_tokenize_str(ALL), len(ALL)))
    punctuation = EVERYTHING.boundaries(gaps(pre_tokenizers.Punctuation("removed").pre_tokenize_str(ALL), len(ALL)))
    # individual digits come out alone between the "a" separators; everything else merges with them
    others = [cp for cp in SCALARS if cp != ord("a")]
    pieces = pre_tokenizers.Digits(individual_digits=True).pre_tokenize_str("a".join(map(chr, others)))
    numeric = scalars_to_boundaries(sorted(ord(p) for p, _ in pieces if len(p) == 1 and p != "a"))
    # The Whitespace pre-tokenizer is Rust regex's \w+|[^\w\s]+ (not Oniguruma): between "a"s, a word
    # character merges with them, any other non-space comes out alone, and a space is dropped
    pieces = pre_tokenizers.Whitespace().pre_tokenize_str("a".join(map(chr, others)))
    seen = set(map(ord, "".join(p for p, _ in pieces)))
    apart = {ord(p) for p, _ in pieces if len(p) == 1 and p != "a"}
    word = scalars_to_boundaries(cp for cp in SCALARS if cp in seen and cp not in apart or cp == ord("a"))
    assert scalars_to_boundaries(cp for cp in others if cp not in seen) == whitespace
    bert = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                      lowercase=False)
    cleaned = per_character(bert, exclude="a")
    control = scalars_to_boundaries(sorted(cp for cp, out in cleaned.items() if out == ""))
    bert_space = scalars_to_boundaries(sorted(cp for cp, out in cleaned.items() if out == " "))
    spacing = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False,
                                         lowercase=False)
    chinese = scalars_to_boundaries(sorted(cp for cp, out in per_character(spacing, "a").items()
                                           if out == f" {chr(cp)} "))
    lowercase = {str(cp): out for cp, out in per_character(normalizers.Lowercase()).items() if out != chr(cp)}
    stripped = per_character(normalizers.StripAccents())
    accents = scalars_to_boundaries(sorted(cp for cp, out in stripped.items() if out == ""))
    # BertNormalizer's strip_accents drops Mn by its own (older) table; StripAccents drops all marks
    bert_strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                            lowercase=False)
    bert_accents = scalars_to_boundaries(sorted(cp for cp, out in per_character(bert_strip).items()
                                                if out == ""))
    return {"bert_strip_accents": deltas(bert_accents), "whitespace": deltas(whitespace), "word": deltas(word), "punctuation": deltas(punctuation), "numeric": deltas(numeric),
            "control": deltas(control), "bert_whitespace": deltas(bert_space), "chinese": deltas(chinese),
            "lowercase": lowercase, "strip_accents": deltas(accents)}


def probe_all() -> dict:
    return {
        "probed_with": {"tokenizers": tokenizers.__version__, "tiktoken": tiktoken.__version__,
                        "regex": regex.__version__, "unicodedata": unicodedata.unidata_version},
        "flavors": {flavor: {**probe_classes(flavor), "folds": probe_case_folds(flavor)}
                    for flavor in ("tokenizers", "tiktoken")},
        "normalization": probe_normalization(),
        "predicates": probe_predicates(),
    }


def compact(data: dict) -> dict:
    """Drop what tiktoken shares with tokenizers (most classes and case folds: both are Unicode 16) and
    store single-character lowercase mappings as (code point delta, offset) pairs;
    tokworker.tokenizer.unicode_data.expand reverses this."""
    ours, theirs = data["flavors"]["tokenizers"], data["flavors"]["tiktoken"]
    for section in ("atoms", "regex_diff", "regex_exprs", "aliases"):
        shared = sorted(k for k, v in theirs[section].items() if ours[section].get(k) == v)
        theirs[section] = {k: v for k, v in theirs[section].items() if k not in shared}
        theirs[section]["shared"] = shared
    if theirs["folds"] == ours["folds"]:
        theirs["folds"] = "shared"
    single, multi, previous = [], {}, 0
    for cp, lowered in sorted(data["predicates"]["lowercase"].items(), key=lambda kv: int(kv[0])):
        if len(lowered) == 1:
            single += [int(cp) - previous, ord(lowered) - int(cp)]
            previous = int(cp)
        else:
            multi[cp] = lowered
    data["predicates"]["lowercase"] = {"single": single, "multi": multi}
    return data


def render(data: dict) -> bytes:
    """The shipped file: zlib-compressed JSON of boundary deltas (probed_with records the versions)."""
    return zlib.compress(json.dumps(compact(data), sort_keys=True, separators=(",", ":")).encode(), 9)


def write_or_check(outputs: dict[Path, bytes], argv: list[str]) -> int:
    """Write each file, or with --check say which committed ones differ from the fresh probe (exit 1)."""
    if "--check" in argv:
        stale = [path.name for path, source in outputs.items()
                 if not path.exists() or path.read_bytes() != source]
        print(f"differ from a fresh probe: {', '.join(stale)}" if stale else "tables up to date")
        return 1 if stale else 0
    for path, source in outputs.items():
        path.write_bytes(source)
        print(f"wrote {path} ({len(source)} bytes)")
    return 0


def main(argv: list[str]) -> int:
    return write_or_check({TABLES: render(probe_all())}, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

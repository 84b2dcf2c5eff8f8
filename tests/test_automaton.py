"""The regex engine and the token automaton are exact.

- the byte DFA agrees with Python's `re.fullmatch` on random regexes and strings;
- on a small hand-made vocabulary, every token sequence (exhaustively, to a depth) is allowed exactly
  when its bytes are a prefix of some match (the `regex` module's partial matching is the oracle), and
  ends in an accepting state exactly when it matches;
- on Qwen3's real 151,669-token vocabulary, the allowed set of every visited state equals a token-by-token
  DFA run, canonical tokenizations (by `tokenizers`) of matching strings are accepted, random allowed
  token walks spell prefixes of matches, and special tokens are never allowed.
Covers tokworker.constrain.automaton and tokworker.constrain.vocab_trie.
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from itertools import product

import pytest
import regex as regex_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.realdata import vocabulary
from tokworker.constrain import ConstraintError, RegexError, TokenAutomaton, VocabTrie
from tokworker.constrain.regex_dfa import Dfa, utf8_sequences
from tokworker.constrain.regex_syntax import parse, to_regex
from tokworker.constrain.tool_choice import tool_call_pattern

# -- the regex engine against Python's re ------------------------------------------------------------

ALPHABET = "ab-\"\\é日😀\n "
_ATOMS = ["a", "b", "é", "日", "😀", "\\-", "\\\\", '"', "\\n", " ", "[ab]", "[^a]", "[a-é]", "[^\"\\\\\\x00-\\x1f]",
          "\\d", "\\w", "\\s", "\\W", ".", "[日-😀]", "\\u00e9", "\\x2d"]


def _regexes():
    def combine(children):
        return st.one_of(
            st.tuples(children, children).map("".join),
            st.tuples(children, children).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(children, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"])).map(
                lambda p: f"(?:{p[0]}){p[1]}"),
            children.map(lambda r: f"({r})"))
    return st.recursive(st.sampled_from(_ATOMS), combine, max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(pattern=_regexes(), texts=st.lists(st.text(ALPHABET, max_size=6), max_size=10), seed=st.integers(0, 99))
def test_dfa_agrees_with_python_re(pattern, texts, seed):
    dfa = Dfa(pattern)
    compiled = re.compile(pattern)
    if dfa.initial:
        texts = texts + [dfa.sample(random.Random(seed), max_bytes=12).decode() for _ in range(5)]
    for text in texts:
        assert dfa.fullmatch(text) == bool(compiled.fullmatch(text)), (pattern, text)
    printed = to_regex(parse(pattern))
    for text in texts:
        assert bool(re.fullmatch(printed, text)) == bool(compiled.fullmatch(text)), (pattern, printed, text)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 0x10FFFF), st.integers(0, 0x10FFFF), st.lists(st.integers(0, 0x10FFFF), max_size=40))
def test_utf8_sequences_cover_exactly_the_range(a, b, probes):
    lo, hi = min(a, b), max(a, b)
    sequences = utf8_sequences(lo, hi)

    def covered(cp):
        data = chr(cp).encode("utf-8", "surrogatepass")
        return sum(len(s) == len(data) and all(x <= byte <= y for byte, (x, y) in zip(data, s)) for s in sequences)
    for cp in probes + [lo, hi, max(lo - 1, 0), min(hi + 1, 0x10FFFF), 0xD7FF, 0xD800, 0xE000]:
        expected = lo <= cp <= hi and not 0xD800 <= cp <= 0xDFFF
        assert covered(cp) == expected, (lo, hi, hex(cp))


def test_all_of_unicode_is_every_scalar_once():
    total = 0
    for sequence in utf8_sequences(0, 0x10FFFF):
        count = 1
        for x, y in sequence:
            count *= y - x + 1
        total += count
    assert total == 0x110000 - 0x800


@pytest.mark.parametrize("pattern, message", [
    ("(?=a)b", "group"), ("a\\1", "escape"), ("\\bx", "escape"), ("a{3,2}", "min repeat"), ("(a", "missing"),
    ("a)", "unbalanced"), ("[a", "unterminated"), ("*a", "nothing to repeat"), ("a^b", "'^'"), ("a$b", "'$'"),
    ("(?i)a", "group"), ("a++", "possessive"), ("[z-a]", "range"), ("x{100000}", "repeat count")])
def test_unsupported_or_malformed_regexes_raise(pattern, message):
    with pytest.raises(RegexError, match=re.escape(message)):
        Dfa(pattern)


def test_oversized_regexes_raise_instead_of_hanging():
    with pytest.raises(RegexError, match="too"):
        Dfa("(?:a{1000}){1000}")
    with pytest.raises(RegexError, match="too complex"):
        Dfa("[ab]*a[ab]{18}")


# -- a small vocabulary, exhaustively ------------------------------------------------------------------

SMALL_VOCAB = [b"a", b"b", b"ab", b"ba", b"abc", b"c", b"{", b"}", b'"', b'"a', b'a"', b"\\", b"\xc3", b"\xa9",
               b"\xc3\xa9", b"\xc3\xa9a", b"", b"aa", b" ", b"\xe6\x97\xa5", b"\xe6", b"\x97\xa5", b"b"]
EOS = 16  # the b"" entry: a special token
SMALL_PATTERNS = ["a(?:b|c)*", '"(?:[^"\\\\]|\\\\.)*"', "(?:ab|a)+c?", '\\{"a": (?:b|é)\\}', "é+日?", "(?:a|b){2,3}",
                  "", "[^a]*", "(?!)|a"]


@lru_cache(maxsize=None)
def _completions(pending: bytes) -> tuple[str, ...]:
    """Characters whose UTF-8 encoding starts with the bytes of an unfinished character."""
    if not pending:
        return ("",)
    length = 2 if pending[0] < 0xE0 else 3 if pending[0] < 0xF0 else 4
    if pending[0] < 0xC0 or len(pending) >= length:
        return ()
    out = []
    for rest in product(range(0x80, 0xC0), repeat=length - len(pending)):
        try:
            out.append((pending + bytes(rest)).decode())
        except UnicodeDecodeError:
            pass
    return tuple(out)


def _split_utf8(data: bytes):
    """(decoded text, bytes of an unfinished last character), or None if the bytes are not UTF-8."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            text = data[:cut].decode()
        except UnicodeDecodeError:
            continue
        if cut == len(data) or _completions(data[cut:]):
            return text, data[cut:]
    return None


@lru_cache(maxsize=None)
def _live(pattern: str, data: bytes) -> bool:
    split = _split_utf8(data)
    if split is None:
        return False
    text, pending = split
    compiled = regex_module.compile(pattern)
    return any(compiled.fullmatch(text + c, partial=True) for c in _completions(pending))


@pytest.mark.parametrize("pattern", SMALL_PATTERNS)
def test_small_vocabulary_exhaustively(pattern):
    automaton = TokenAutomaton(pattern, SMALL_VOCAB, eos_ids=[EOS])
    ids = range(len(SMALL_VOCAB))

    def explore(state, spelled: bytes, depth: int):
        allowed = set(automaton.allowed(state))
        accepting = re.fullmatch(pattern, spelled.decode()) is not None if _split_utf8(spelled) and \
            not _split_utf8(spelled)[1] else False
        assert automaton.is_accepting(state) == accepting, (pattern, spelled)
        assert (EOS in allowed) == accepting
        mask = automaton.allowed_mask(state)
        assert [i for i in ids if mask[i]] == sorted(allowed)
        for token in ids:
            if token == EOS:
                continue
            extended = spelled + SMALL_VOCAB[token]
            expected = bool(SMALL_VOCAB[token]) and _live(pattern, extended)
            assert (token in allowed) == expected, (pattern, extended)
            if expected and depth < 3:
                explore(automaton.advance(state, token), extended, depth + 1)
            elif not expected:
                with pytest.raises(ConstraintError):
                    automaton.advance(state, token)
    explore(automaton.initial_state, b"", 0)


def test_duplicate_token_bytes_and_control_tokens():
    vocab = [b"a", b"b", b"a", b"", b"ab", b""]
    automaton = TokenAutomaton("a+b", vocab)
    assert list(automaton.allowed(automaton.initial_state)) == [0, 2, 4]
    state = automaton.advance(automaton.initial_state, 2)
    assert list(automaton.allowed(state)) == [0, 1, 2, 4]
    with_marker = TokenAutomaton("\\[T\\]ab", VocabTrie(vocab + [b"[", b"T", b"]"], control_tokens={5: b"[T]"}))
    assert list(with_marker.allowed(with_marker.initial_state)) == [5, 6]
    with pytest.raises(ValueError):
        VocabTrie(vocab, control_tokens={99: b"x"})


def test_bad_states_and_eos_ids_raise():
    automaton = TokenAutomaton("ab", [b"a", b"b", b""], eos_ids=[2])
    state = automaton.advance(automaton.initial_state, 0)
    with pytest.raises(ConstraintError):
        automaton.advance(state, 2)  # EOS before the match is complete
    final = automaton.advance(state, 1)
    assert automaton.allowed(final).tolist() == [2] and automaton.advance(final, 2) == final
    for bad in (0, -1, 10**6, "1"):
        with pytest.raises(ConstraintError):
            automaton.allowed(bad)
    with pytest.raises(ConstraintError):
        TokenAutomaton("ab", [b"a"], eos_ids=[7])
    with pytest.raises(ConstraintError, match="no text"):
        TokenAutomaton("a(?!)", [b"a"])


# -- Qwen3's real vocabulary ----------------------------------------------------------------------------

def _bytes_to_unicode() -> dict[str, int]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    codes, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes)}


@lru_cache(maxsize=1)
def qwen():
    """(tokenizers.Tokenizer, vocab bytes per id with b"" for special tokens, VocabTrie) - tests only."""
    tokenizers = pytest.importorskip("tokenizers")
    path = vocabulary("qwen3_dir") / "tokenizer.json"
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    added = {t["id"]: t for t in json.loads(path.read_text())["added_tokens"]}
    byte_of = _bytes_to_unicode()
    vocab = [b""] * tokenizer.get_vocab_size()
    for token, i in tokenizer.get_vocab().items():
        if i in added:
            vocab[i] = b"" if added[i]["special"] else token.encode()
        else:
            vocab[i] = bytes(byte_of[c] for c in token)
    return tokenizer, vocab, VocabTrie(vocab)


IM_END = 151645
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["location"], "properties": {
        "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}}}}}


def test_tokworker_vocab_bytes_equal_the_reference():
    """The contract this module builds on: Tokenizer.vocab_bytes() is what `tokenizers` spells."""
    _, vocab, _ = qwen()
    try:
        from tokworker.tokenizer import Tokenizer
        ours = Tokenizer.from_dir(vocabulary("qwen3_dir")).vocab_bytes()
    except ImportError:
        pytest.skip("tokworker.tokenizer not there yet")
    assert ours == vocab


def _naive_next_states(automaton, vocab, state):
    return {i: s for i, data in enumerate(vocab) if data and (s := automaton.dfa.walk(state, data))}


def test_real_vocabulary_allowed_sets_equal_a_token_by_token_run():
    _, vocab, trie = qwen()
    automaton = TokenAutomaton(tool_call_pattern([WEATHER_TOOL]), trie, eos_ids=[IM_END])
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Zürich \\"HB\\" 日本", "days": 12}}\n</tool_call>'
    state, states = automaton.initial_state, []
    for byte in text.encode():
        states.append(state)
        state = automaton.dfa.rows[state][byte]
    chosen = sorted(set(states), key=states.index)
    for state in chosen[::max(1, len(chosen) // 10)] + [states[text.index("Z") + 2]]:
        expected = _naive_next_states(automaton, vocab, state)
        assert sorted(expected) == automaton.allowed(state).tolist()
        assert all(automaton.advance(state, t) == s for t, s in expected.items())


def test_real_vocabulary_canonical_tokenizations_are_accepted():
    tokenizer, vocab, trie = qwen()
    pattern = tool_call_pattern([WEATHER_TOOL])
    automaton = TokenAutomaton(pattern, trie, eos_ids=[IM_END])
    rng = random.Random(5)
    arguments = [{"location": "Paris, France"}, {"location": "東京", "unit": "celsius", "days": 3},
                 {"location": "São Paulo 🌧", "days": 14}, {"location": "a\nb\t\"c\" \\ d"}]
    texts = ['<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(a, ensure_ascii=False) + "}\n</tool_call>"
             for a in arguments]
    texts += [Dfa(pattern).sample(rng, max_bytes=80).decode() for _ in range(30)]
    checked = 0
    for text in texts:
        assert re.fullmatch(pattern, text)
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if b"".join(vocab[i] for i in ids) != text.encode():
            continue  # Qwen normalizes to NFC: random text that is not NFC encodes as other text
        checked += 1
        state = automaton.initial_state
        for token in ids:
            assert token in automaton.allowed(state)
            state = automaton.advance(state, token)
        assert automaton.is_accepting(state) and IM_END in automaton.allowed(state)
    assert checked >= 20


def test_real_vocabulary_random_token_walks_spell_prefixes_of_matches():
    _, vocab, trie = qwen()
    pattern = tool_call_pattern([WEATHER_TOOL])
    automaton = TokenAutomaton(pattern, trie, eos_ids=[IM_END])
    specials = {i for i, data in enumerate(vocab) if not data} - {IM_END}
    rng = random.Random(11)
    compiled = regex_module.compile(pattern)
    for _ in range(25):
        state, spelled = automaton.initial_state, b""
        for _ in range(40):
            allowed = automaton.allowed(state)
            assert not specials.intersection(allowed)
            if IM_END in allowed:
                assert compiled.fullmatch(spelled.decode())
                if rng.random() < 0.5:
                    break
            choices = [t for t in allowed if t != IM_END]
            if not choices:
                break
            # half the time prefer long tokens, so walks get through the wrapper into the arguments
            token = max(rng.sample(choices, min(5, len(choices))), key=lambda t: len(vocab[t])) \
                if rng.random() < 0.5 else rng.choice(choices)
            spelled += vocab[token]
            state = automaton.advance(state, token)
            split = _split_utf8(spelled)
            assert split is not None
            if not split[1]:
                assert compiled.fullmatch(split[0], partial=True), spelled

"""StopChecker: the streamed text never contains any part of a stop string, whatever the split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.cuts import cut_at
from tests.work import lines_run
from tokworker.stream.stop import StopChecker

PIECES = ["a", "b", "c", "ab", "abc", "</", "ans", "wer>", "</answer>", "\n", "é", "日本", "🧑‍🚀", "STOP", "ST", "OP"]
STOPS = ["</answer>", "abc", "bca", "b", "STOP", "\n\n", "日本", "🧑‍🚀x", "aaaa"]


def reference(text: str, stops: list[str], include: bool, armed_from: int = 0):
    """Token-by-token truth: the first position where some stop string is complete (ending after
    armed_from) ends the text; on a tie the longer stop (earlier start) is the match."""
    stops = [s for s in stops if s]
    for end in range(armed_from + 1, len(text) + 1):
        done = [s for s in stops if text.endswith(s, 0, end)]
        if done:
            stop = max(done, key=len)
            return (text[:end] if include else text[:end - len(stop)]), stop
    return text, None


def run(stops, include, deltas, armed_from_delta=0):
    checker = StopChecker(stops, include_stop=include)
    out, emitted = [], []
    for i, delta in enumerate(deltas):
        out.append(checker.add(delta, can_stop=i >= armed_from_delta))
        emitted.append("".join(out))
    out.append(checker.finish())
    return "".join(out), checker, emitted


def with_empties(deltas: list[str], places: list[int]) -> list[str]:
    """Empty deltas put in at `places` (a token that shows nothing: a skipped special token)."""
    deltas = list(deltas)
    for place in places:
        deltas.insert(place % (len(deltas) + 1), "")
    return deltas


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=25), st.lists(st.sampled_from(STOPS), min_size=1, max_size=3),
       st.booleans(), st.lists(st.integers(0, 1000), max_size=12), st.lists(st.integers(0, 30), max_size=4))
def test_split_anywhere_equals_whole_and_reference(pieces, stops, include, cuts, empties):
    text = "".join(pieces)
    expected, matched = reference(text, stops, include)
    whole, checker_whole, _ = run(stops, include, [text])
    streamed, checker, emitted = run(stops, include, with_empties(cut_at(text, cuts), empties))
    assert whole == streamed == expected
    assert checker.matched == checker_whole.matched == matched
    assert checker.stopped == (matched is not None)
    longest = max(len(s) for s in stops)
    for prefix in emitted:
        # Nothing shown is ever taken back, so no part of a stop string was ever shown ...
        assert expected.startswith(prefix)
    # ... and nothing is held back longer than a possible stop prefix needs.
    assert len(checker._held) < longest


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=20), st.lists(st.sampled_from(STOPS), min_size=1, max_size=3),
       st.lists(st.integers(0, 1000), min_size=1, max_size=10), st.integers(0, 12))
def test_disarmed_deltas_never_stop(pieces, stops, cuts, armed_from_delta):
    """The first min_tokens tokens cannot stop: a stop string must end in text that came after them."""
    deltas = cut_at("".join(pieces), cuts)
    armed_from = len("".join(deltas[:armed_from_delta]))
    expected, matched = reference("".join(deltas), stops, False, armed_from)
    streamed, checker, _ = run(stops, False, deltas, armed_from_delta)
    assert streamed == expected
    assert checker.matched == matched


def test_an_empty_delta_between_two_halves_of_a_stop_keeps_the_first():
    """Qwen3's "Hello", "\\n", <|im_end|> (skipped: no text), "\\n" with stop "\\n\\n": the empty delta released
    the held "\\n", and the stop went by (found by test_stream_state's property test)."""
    checker = StopChecker(["\n\n"])
    assert [checker.add(d) for d in ("Hello\n", "", "\n")] == ["Hello", "", ""]
    assert checker.stopped and checker.matched == "\n\n"


def test_spec_example_holds_then_releases_or_stops():
    checker = StopChecker(["</answer>"])
    assert checker.add("2.</ans") == "2."
    assert checker.add("ia") == "</ansia"
    assert checker.add("</ans") == ""
    assert checker.add("wer> more") == ""
    assert checker.stopped and checker.matched == "</answer>"
    assert checker.add("anything") == "" and checker.finish() == ""


def test_include_stop_ends_exactly_after_the_stop():
    checker = StopChecker(["STOP"], include_stop=True)
    assert checker.add("go ST") == "go "
    assert checker.add("OP and more") == "STOP"


def test_first_stop_to_complete_wins_over_an_earlier_start():
    checker = StopChecker(["abcd", "bc"])
    assert checker.add("xabcd") == "xa"
    assert checker.matched == "bc"


def test_unicode_stops_and_no_stops():
    checker = StopChecker(["🧑‍🚀"])
    assert checker.add("hi 🧑") == "hi "
    assert checker.add("\u200d🚀!") == ""
    assert StopChecker([]).add("text") == "text"
    assert StopChecker(["", "x"]).add("axb") == "a"


def test_long_stream_holds_little():
    checker = StopChecker(["</answer>", "\n\nUser:"])
    total = []
    for _ in range(20000):
        total.append(checker.add("word </ans\n"))
        assert len(checker._held) <= len("\n\nUser:") - 1
    assert "".join(total) + checker.finish() == "word </ans\n" * 20000


def test_bad_stop_type_is_a_value_error():
    with pytest.raises(ValueError):
        StopChecker([b"bytes"])


@settings(max_examples=300, deadline=None)
@given(st.text("abc", max_size=40), st.lists(st.text("abc", min_size=1, max_size=6), min_size=1, max_size=5),
       st.booleans(), st.lists(st.integers(0, 1000), max_size=12), st.integers(0, 6))
def test_overlapping_stops_on_a_small_alphabet(text, stops, include, cuts, armed_from_delta):
    """Stops that are prefixes, suffixes and infixes of each other: the automaton's failure links at work."""
    deltas = cut_at(text, cuts)
    armed_from = len("".join(deltas[:armed_from_delta]))
    expected, matched = reference(text, stops, include, armed_from)
    streamed, checker, emitted = run(stops, include, deltas, armed_from_delta)
    assert streamed == expected and checker.matched == matched
    assert all(expected.startswith(prefix) for prefix in emitted)
    assert len(checker._held) < max(map(len, stops))


def test_one_long_stop_string_is_cheap_and_bounded():
    """A 60,000-character stop string used to keep every prefix (about L^2/2 characters: a worker went from
    96 MB to 1.8 GB, and the open took 2.6 s). Now it costs a few integers a character, and more than
    MAX_STOP_BYTES of stop strings are refused with a typed error."""
    import tracemalloc

    from tokworker.stream import stop as stop_module

    long_stop = "".join(chr(0x4E00 + i) for i in range(1000)) + "ab" * 29500     # 60,000 characters
    tracemalloc.start()
    checker = StopChecker([long_stop, "</answer>"])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * 2**20, f"building the automaton peaked at {peak / 2**20:.1f} MiB"
    # Its work grows with the length, not its square (counted in lines run, not timed: the machine is shared).
    small, large = (lines_run(lambda: StopChecker(["ab" * n + "c", "</answer>"])) for n in (1500, 3000))
    assert large < 2.5 * small, (small, large)
    assert checker.add(long_stop[:30000]) == ""                     # held: it may still become the stop
    assert checker.add(long_stop[30000:-1] + "y") == long_stop[:-1] + "y"
    assert checker.add("a " + long_stop + " b") == "a "
    assert checker.matched == long_stop
    with pytest.raises(stop_module.StopStringError, match="over the limit"):
        StopChecker(["y" * (stop_module.MAX_STOP_BYTES + 1)])
    with pytest.raises(stop_module.StopStringError, match="over the limit"):
        StopChecker(["é" * (stop_module.MAX_STOP_BYTES // 2 + 1)])


def test_stops_may_hold_any_character():
    """The automaton's trie marks the end of a chain with a character no stop holds: there always is one."""
    stop = "".join(map(chr, range(0x10FFF0, 0x110000))) + "\uffff\ufffe"
    checker = StopChecker([stop, "\U0010ffff!"])
    assert checker.add("a" + stop[:5]) == "a"
    assert checker.add(stop[5:] + " b") == "" and checker.matched == stop

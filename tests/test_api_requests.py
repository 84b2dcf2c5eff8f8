"""The depth a body is refused at, read from its bytes before decoding (tokworker.api.bodies.nesting_over),
against the depth of the value json.dumps wrote: strings full of brackets, quotes and backslashes, and every
separator style, never fool it by a level.
Covers tokworker.api.requests and tokworker.api.bodies."""

from __future__ import annotations

import json

from hypothesis import example, given, strategies as st

from tokworker.api.bodies import MAX_DEPTH, nesting_over

TRICKY = st.text(alphabet='[]{}"\\ a\n\u00e9', max_size=6)
VALUES = st.recursive(st.none() | st.integers() | TRICKY,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY, inner, max_size=3),
                      max_leaves=30)


def depth(value) -> int:
    if isinstance(value, (list, dict)):
        return 1 + max(map(depth, value.values() if isinstance(value, dict) else value), default=0)
    return 0


@given(VALUES, st.booleans(), st.sampled_from([(",", ":"), (", ", ": ")]))
@example(["\\", '"[[[', [[]]], True, (", ", ": "))
@example(['\\"]', [[[]]]], True, (", ", ": "))
def test_the_depth_read_from_the_bytes_is_the_values(value, ascii_only, separators):
    raw = json.dumps(value, ensure_ascii=ascii_only, separators=separators).encode()
    levels = depth(value)
    for limit in range(max(0, levels - 1), levels + 1):
        assert nesting_over(raw, limit) == (levels > limit)


def test_the_issues_body_is_over_and_a_deep_but_allowed_one_is_not():
    deep = b"[" * 10_000 + b"]" * 10_000
    assert nesting_over(b'{"messages": ' + deep + b"}")
    allowed = b"[" * (MAX_DEPTH - 1) + b'"]]]]"' + b"]" * (MAX_DEPTH - 1)
    assert not nesting_over(b'{"x": ' + allowed + b"}")
    assert nesting_over(b'{"x": [' + allowed + b"]}")

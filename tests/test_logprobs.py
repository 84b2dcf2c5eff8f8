"""Logprob entries and usage from TextStream: one entry per accepted token, in order, each riding with the
delta that carries (the start of) its text or, held back, with a later one; the text is the same as a
stream without logprobs under every grouping of the steps; usage counts the prompt, the tokens and the
reasoning tokens."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tokworker.protocol.deltas import StreamParams
from tokworker.stream.accounting import token_name
from tokworker.stream.state import TextStream
from tokworker.tokenizer import Tokenizer

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
TEXTS = ["Hello 日本語 🧑‍🚀 world, naïve café. STOP and more",
         "<think>\nabout 東京 and </answer>\n</think>\n\nThe answer </answer> is 42.",
         "<think>\nA call.\n</think>\n\nOK<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
         "{\"city\": \"Zürich\"}}\n</tool_call>"]
PARAMS = [dict(stop=["STOP"]), dict(stop=["</answer>"], reasoning_parser="qwen3"),
          dict(reasoning_parser="qwen3", tool_parser="hermes", tools=TOOLS), dict(), dict(min_tokens=3, max_tokens=20)]
TOKENIZER = Tokenizer.from_dir(MODEL)


def logprobs_for(ids, top):
    size = TOKENIZER.vocab_size
    return [(-0.5 - i / 100, [((t + j) % size, -1.0 - j) for j in range(top)]) for i, t in enumerate(ids)]


def run(params, ids, sizes, logprobs=None, finish=False):
    stream = TextStream(TOKENIZER, params, prompt_ids=[1, 2, 3, 4], prompt_text="<|im_start|>assistant\n")
    updates, at, k = [], 0, 0
    while at < len(ids):
        size = sizes[k % len(sizes)]
        k += 1
        batch = ids[at:at + size]
        updates.append(stream.push(batch, logprobs[at:at + size]) if logprobs is not None else stream.push(batch))
        at += size
    if finish:
        updates.append(stream.finish())
    return stream, updates


def joined(updates):
    return ("".join(d.content or "" for u in updates for d in u.deltas),
            "".join(d.reasoning_content or "" for u in updates for d in u.deltas),
            [(c.index, c.function.name, c.function.arguments) for u in updates for d in u.deltas
             for c in d.tool_calls or ()], [u.finish_reason for u in updates if u.finish_reason])


def calls_joined(calls):
    out: dict = {}
    for index, name, args in calls:
        entry = out.setdefault(index, ["", ""])
        entry[0] += name or ""
        entry[1] += args or ""
    return out


case = st.tuples(st.sampled_from(range(len(TEXTS))), st.sampled_from(range(len(PARAMS))),
                 st.lists(st.integers(1, 6), min_size=1, max_size=8), st.integers(0, 3), st.booleans(),
                 st.booleans())


@settings(max_examples=150, deadline=None)
@given(case)
def test_entries_ride_with_text_under_any_grouping(args):
    text_index, params_index, sizes, top, eos, finish = args
    ids = TOKENIZER.encode(TEXTS[text_index]) + ([TOKENIZER.eos_token_ids[0]] if eos else [])
    params = StreamParams(**PARAMS[params_index])
    with_lp = StreamParams(**PARAMS[params_index], logprobs=top, include_usage=True)
    plain_stream, plain = run(params, ids, [1], finish=finish)   # a stop string ends a batch where it ends
    stream, updates = run(with_lp, ids, sizes, logprobs_for(ids, top), finish=finish)
    a, b = joined(plain), joined(updates)
    assert (a[0], a[1], calls_joined(a[2]), a[3]) == (b[0], b[1], calls_joined(b[2]), b[3])
    entries = []
    for update in updates:
        if update.logprobs:
            assert len(update.logprobs) == max(len(update.deltas), 1)
        else:
            assert update.finish_reason is not None or not update.deltas or top is None
        entries += [e for lst in update.logprobs for e in lst]
    accepted = stream.num_tokens
    assert accepted == plain_stream.num_tokens and not (updates[-1].finish_reason and stream.accounting._pending)
    names = {}
    want = logprobs_for(ids, top)[:accepted]
    ended = updates[-1].finish_reason is not None
    if not ended:   # the entries of tokens whose text is still held have not gone out yet
        accepted, want = len(entries), want[:len(entries)]
    assert [(e.token, e.bytes) for e in entries] == [token_name(TOKENIZER, names, t) for t in ids[:accepted]]
    assert [e.logprob for e in entries] == [w[0] for w in want]
    assert all(len(e.top_logprobs) == top for e in entries)
    final = updates[-1] if updates[-1].finish_reason else None
    if final is not None:
        assert final.usage.prompt_tokens == 4 and final.usage.completion_tokens == accepted
        assert (final.usage.reasoning_tokens is not None) == bool(params.reasoning_parser)


def test_plain_text_bytes_join_and_alignment():
    """With no stop, parser or special token, every token's entry is in the update that shows its first
    byte's character, and the entries' bytes are the text's bytes."""
    ids = TOKENIZER.encode(TEXTS[0])
    stream, updates = run(StreamParams(logprobs=1), ids, [1], logprobs_for(ids, 1), finish=True)
    text = joined(updates)[0]
    entries = [e for u in updates for lst in u.logprobs for e in lst]
    assert b"".join(bytes(e.bytes) for e in entries) == text.encode()
    shown = sent = 0
    for update in updates:
        shown += sum(len(d.content.encode()) for d in update.deltas)
        sent += sum(len(e.bytes) for lst in update.logprobs for e in lst)
        assert 0 <= sent - shown < 4      # never behind its text, ahead by at most a partial character


def test_usage_counts_reasoning_tokens():
    text = TEXTS[1]
    ids = TOKENIZER.encode(text) + [TOKENIZER.eos_token_ids[0]]
    stream, updates = run(StreamParams(reasoning_parser="qwen3", include_usage=True), ids, [1])
    usage = updates[-1].usage
    # from the first token that shows reasoning text to the last: not the markers, nor the newline qwen3
    # strips after <think>
    thinking = TOKENIZER.encode("about 東京 and </answer>\n")
    assert usage.completion_tokens == len(ids) and usage.prompt_tokens == 4
    assert usage.reasoning_tokens == len(thinking)


def test_continuous_usage_on_every_update():
    ids = TOKENIZER.encode("Hello world, once more")
    stream, updates = run(StreamParams(continuous_usage_stats=True, include_usage=True), ids, [2], finish=True)
    counts = [u.usage.completion_tokens for u in updates if u.deltas]
    assert counts == sorted(counts) and updates[-1].usage.completion_tokens == len(ids)


def test_without_logprobs_the_stream_is_untouched():
    stream = TextStream(TOKENIZER, StreamParams())
    assert "push" not in vars(stream) and not hasattr(stream, "accounting")


@pytest.mark.parametrize("bad, message", [([(-1.0, [])] * 2, "2 logprobs"), ([-1.0], "logprob, ")])
def test_bad_logprobs_are_clear_errors(bad, message):
    stream = TextStream(TOKENIZER, StreamParams(logprobs=1))
    with pytest.raises((ValueError, TypeError), match=message):
        stream.push([5], bad)
    assert stream.push([5], [(-1.0, [(5, -1.0)])]).logprobs  # the stream is still usable


def test_infinite_logprobs_are_floored_as_vllm_does():
    stream = TextStream(TOKENIZER, StreamParams(logprobs=1))
    update = stream.push(TOKENIZER.encode("Hi"), [(float("-inf"), [(5, float("-inf"))])] * len(TOKENIZER.encode("Hi")))
    entries = [e for lst in update.logprobs for e in lst]
    assert entries and all(e.logprob == -9999.0 and e.top_logprobs[0].logprob == -9999.0 for e in entries)


def test_random_engine_batches_match_one_by_one():
    rng = random.Random(3)
    for text in TEXTS:
        ids = TOKENIZER.encode(text)
        sizes = [rng.randint(1, 4) for _ in range(10)]
        params = StreamParams(logprobs=2, reasoning_parser="qwen3", tool_parser="hermes", tools=TOOLS)
        _, a = run(params, ids, [1], logprobs_for(ids, 2), finish=True)
        _, b = run(params, ids, sizes, logprobs_for(ids, 2), finish=True)
        assert [e for u in a for lst in u.logprobs for e in lst] == [e for u in b for lst in u.logprobs for e in lst]


@pytest.mark.slow  # worker processes
def test_through_a_pool_plain_updates_carry_the_same_entries():
    """pool.step({id: (ids, logprobs)}) beside plain {id: ids}; entries and usage survive the buffered
    iterator's merging; a wrong logprobs shape fails that stream with a typed error, the worker lives on."""
    import uvloop

    from tokworker.frontend import TokenizerPool

    text = TEXTS[2]
    ids = TOKENIZER.encode(text) + [TOKENIZER.eos_token_ids[0]]
    params = StreamParams(logprobs=2, include_usage=True, reasoning_parser="qwen3", tool_parser="hermes",
                          tools=TOOLS)
    lps = logprobs_for(ids, 2)
    _, local = run(params, ids, [1], lps)

    async def main():
        pool = await TokenizerPool.spawn(str(MODEL), workers=1)
        try:
            scored = await pool.open_stream("scored", params, prompt_ids=[1, 2, 3, 4],
                                            prompt_text="<|im_start|>assistant\n")
            await pool.open_stream("plain", StreamParams(), buffer=False)
            await pool.open_stream("bad", StreamParams(logprobs=1), buffer=False)
            at, sizes = 0, [1, 3, 2, 5]
            bad = None
            while at < len(ids):
                size = sizes[at % len(sizes)]
                step = {"scored": (ids[at:at + size], lps[at:at + size]), "plain": ids[at:at + size]}
                if at == 0:
                    step["bad"] = (ids[:2], lps[:1])
                replies = await pool.step(step)
                bad = bad or replies.get("bad")
                at += size
            updates = [update async for update in scored]     # buffered: several merged into one
            stats = await pool.stats()
            return updates, bad, stats
        finally:
            await pool.close()

    updates, bad, stats = uvloop.run(main())
    entries = [e for u in updates for lst in u.logprobs for e in lst]
    assert entries == [e for u in local for lst in u.logprobs for e in lst]
    assert joined(updates)[:2] == joined(local)[:2]
    assert updates[-1].usage == local[-1].usage and updates[-1].usage.prompt_tokens == 4
    assert bad.finish_reason == "error"
    assert stats[0].streams_opened == 3 and stats[0].streams_open == 0   # the same worker served all three

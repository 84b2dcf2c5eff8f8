"""TextStream: vLLM v1's stop conditions in one place, the same result however the engine's ids are
grouped into steps (one token, k tokens, random: speculative decoding), checked against a token-by-token
reference built on `tokenizers`' decode.
Covers tokworker.stream.coalesce."""

from __future__ import annotations

import functools
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tokworker.protocol.deltas import StreamParams, StreamUpdate
from tests.cuts import cut_at
from tests.realdata import vocabulary
from tests.test_detokenizer import load
from tokworker.stream.detokenizer import IncrementalDetokenizer
from tokworker.stream.state import TextStream
from tokworker.tokenizer import Tokenizer

PIECES = ["Hello", " world", ".", "\n", "\n\n", "</answer>", "STOP", " 日本語", " 🧑‍🚀", "<think>", "</think>",
          " The answer is 42", "User:", "ab", "c"]
STOPS = ["</answer>", "STOP", "\n\n", "42", "🧑", "answer is", "b", "User:"]


def qwen():
    """(tokworker, tokenizers) for Qwen3, loaded once per test session (shared with the detokenizer tests)."""
    return load("qwen3_dir")


@pytest.fixture(scope="module")
def tok():
    return qwen()[0]


@pytest.fixture(scope="module")
def ref():
    return qwen()[1]


def run(tokenizer, params, steps, finish="length", **kwargs):
    stream = TextStream(tokenizer, params, **kwargs)
    updates = [stream.push(step) for step in steps]
    updates.append(stream.finish(finish))
    return summarize(updates), updates


def summarize(updates: list[StreamUpdate]):
    content = "".join(d.content or "" for u in updates for d in u.deltas)
    reasoning = "".join(d.reasoning_content or "" for u in updates for d in u.deltas)
    calls = {}
    for u in updates:
        for d in u.deltas:
            for call in d.tool_calls or ():
                entry = calls.setdefault(call.index, {"name": None, "arguments": ""})
                if call.function is not None:
                    entry["name"] = entry["name"] or call.function.name
                    entry["arguments"] += call.function.arguments or ""
    ends = [(u.finish_reason, u.stop_reason, u.abort) for u in updates if u.finish_reason]
    assert len(ends) == 1, ends  # exactly one update ends the stream
    return content, reasoning, calls, ends[0]


def reference(tok, ref, ids, params: StreamParams):
    """vLLM v1, token by token: check_stop on each id, then stop strings on the text after min_tokens."""
    eos = tok.token_to_id(tok.eos_token)
    kept, finish = [], None
    for k, token_id in enumerate(ids):
        position = k + 1
        if params.max_tokens is not None and position >= params.max_tokens:
            kept.append(token_id)
            finish = ("length", None)
            break
        if position > params.min_tokens and not params.ignore_eos and token_id == eos:
            finish = ("stop", None)
        elif position > params.min_tokens and token_id in params.stop_token_ids:
            finish = ("stop", token_id)
        if finish:
            if params.include_stop_str_in_output:
                kept.append(token_id)
            break
        kept.append(token_id)
    text = ref.decode(kept, skip_special_tokens=params.skip_special_tokens)
    # chars shown by the first min_tokens tokens cannot complete a stop string
    armed_from = len(IncrementalDetokenizer(tok, params.skip_special_tokens).add(kept[:params.min_tokens]))
    abort = False
    for end in range(armed_from + 1, len(text) + 1):
        done = [s for s in params.stop if s and text.endswith(s, 0, end)]
        if done:
            stop = max(done, key=len)
            text = text[:end] if params.include_stop_str_in_output else text[:end - len(stop)]
            finish, abort = ("stop", stop), True
            break
    finish = finish or ("length", None)
    return text, "", {}, (*finish, abort)


def every_split(ids):
    """One id per engine step, two steps cut at every position, and all ids in one step."""
    yield [[i] for i in ids]
    for cut in range(1, len(ids)):
        yield [ids[:cut], ids[cut:]]
    yield [ids]


def streams_alike(tokenizer, params, ids, **kwargs):
    """Run the ids through TextStream in every grouping of every_split: all give the same (content,
    reasoning, calls, end); returns it."""
    results = {json.dumps(run(tokenizer, params, steps, **kwargs)[0]) for steps in every_split(ids)}
    assert len(results) == 1, results
    return json.loads(results.pop())


def splits(ids, seed_cuts):
    yield cut_at(ids, seed_cuts)
    yield [[i] for i in ids]
    for k in (2, 3, 5):
        yield [ids[i:i + k] for i in range(0, len(ids), k)]
    yield [ids]


def ids_strategy(ref, eos):
    return st.lists(st.one_of(st.sampled_from(PIECES), st.just(None)), max_size=16).map(
        lambda parts: [i for p in parts for i in ([eos] if p is None else ref.encode(p, add_special_tokens=False).ids)])


def params_strategy(ids_hint=()):
    return st.builds(
        StreamParams,
        stop=st.lists(st.sampled_from(STOPS), max_size=3),
        stop_token_ids=st.lists(st.integers(0, 151000), max_size=2),
        include_stop_str_in_output=st.booleans(),
        ignore_eos=st.booleans(),
        min_tokens=st.integers(0, 6),
        max_tokens=st.one_of(st.none(), st.integers(1, 40)),
        skip_special_tokens=st.booleans(),
    )


def test_any_grouping_of_steps_matches_token_by_token_reference(tok, ref):
    eos = tok.token_to_id(tok.eos_token)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ids_strategy(ref, eos), params_strategy(), st.lists(st.integers(0, 1000), max_size=8), st.data())
    def check(ids, params, cuts, data):
        if ids and data.draw(st.booleans()):  # sometimes stop on a token that really occurs
            params.stop_token_ids = [data.draw(st.sampled_from(ids))]
        expected = reference(tok, ref, ids, params)
        for steps in splits(ids, cuts):
            result, _ = run(tok, params, steps)
            assert result == expected

    check()


@pytest.mark.parametrize("parser", ["qwen3", "deepseek_r1"])
def test_reasoning_streams_agree_across_groupings_and_with_whole_parse(tok, ref, parser):
    from tokworker.parsers.reasoning import get_reasoning_parser
    eos = tok.token_to_id(tok.eos_token)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ids_strategy(ref, eos), st.lists(st.sampled_from(STOPS), max_size=2), st.lists(st.integers(0, 1000), max_size=8))
    def check(ids, stops, cuts):
        params = StreamParams(stop=stops, reasoning_parser=parser)
        results = {json.dumps(run(tok, params, steps)[0]) for steps in splits(ids, cuts)}
        assert len(results) == 1
        content, reasoning, _, (finish, stop_reason, abort) = json.loads(results.pop())
        text = reference(tok, ref, ids, StreamParams(stop=stops))[0]
        assert (reasoning or None, content or None) == get_reasoning_parser(parser).parse(text)

    check()


def test_eos_inside_a_multi_token_step_ends_there(tok, ref):
    eos = tok.token_to_id("<|im_end|>")
    ids = ref.encode("The end.", add_special_tokens=False).ids
    stream = TextStream(tok, StreamParams())
    update = stream.push(ids + [eos] + ref.encode(" More text", add_special_tokens=False).ids)
    assert [d.content for d in update.deltas] == ["The end."]
    assert (update.finish_reason, update.stop_reason, update.abort) == ("stop", None, False)
    assert stream.push(ids) == StreamUpdate() and stream.finish() == StreamUpdate()
    assert stream.num_tokens == len(ids) + 1


def test_stop_string_inside_a_multi_token_step_aborts(tok, ref):
    ids = ref.encode("Answer: 42</answer> trailing", add_special_tokens=False).ids
    update = TextStream(tok, StreamParams(stop=["</answer>"])).push(ids)
    assert [d.content for d in update.deltas] == ["Answer: 42"]
    assert (update.finish_reason, update.stop_reason, update.abort) == ("stop", "</answer>", True)
    update = TextStream(tok, StreamParams(stop=["</answer>"], include_stop_str_in_output=True)).push(ids)
    assert update.deltas[0].content == "Answer: 42</answer>"


def test_stop_token_ids_min_tokens_and_max_tokens(tok, ref):
    ids = ref.encode("one two three four five", add_special_tokens=False).ids
    three = ids[2]
    (content, _, _, end), _ = run(tok, StreamParams(stop_token_ids=[three]), [[i] for i in ids])
    assert content == "one two" and end == ("stop", three, False)
    (content, _, _, end), _ = run(tok, StreamParams(stop_token_ids=[three], include_stop_str_in_output=True), [ids])
    assert content == "one two three" and end == ("stop", three, False)
    (content, _, _, end), _ = run(tok, StreamParams(stop_token_ids=[three], min_tokens=3), [ids])
    assert content == "one two three four five" and end == ("length", None, False)
    (content, _, _, end), _ = run(tok, StreamParams(max_tokens=2), [ids])
    assert content == "one two" and end == ("length", None, False)
    eos = tok.token_to_id("<|im_end|>")
    (content, _, _, end), _ = run(tok, StreamParams(max_tokens=3), [ids[:2] + [eos] + ids[2:]])
    assert end == ("length", None, False)  # vLLM checks length before eos
    (content, _, _, end), _ = run(tok, StreamParams(ignore_eos=True), [ids[:2] + [eos] + ids[2:]])
    assert content == "one two three four five" and end == ("length", None, False)
    (content, _, _, end), _ = run(tok, StreamParams(stop=["two"], min_tokens=2), [[i] for i in ids])
    assert content == "one two three four five" and end == ("length", None, False)
    (content, _, _, end), _ = run(tok, StreamParams(stop=["three"], min_tokens=2), [[i] for i in ids])
    assert content == "one two " and end == ("stop", "three", True)


def test_generation_config_eos_ids_stop_with_their_id(tmp_path, ref):
    source = vocabulary("qwen3_dir")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, tmp_path / name)
    endoftext = ref.token_to_id("<|endoftext|>")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, endoftext]}))
    tok = Tokenizer.from_dir(tmp_path)
    ids = ref.encode("Done", add_special_tokens=False).ids
    (content, _, _, end), _ = run(tok, StreamParams(), [ids + [endoftext]])
    assert content == "Done" and end == ("stop", endoftext, False)
    (content, _, _, end), _ = run(tok, StreamParams(), [ids + [151645]])
    assert end == ("stop", None, False)
    (_, _, _, end), _ = run(tok, StreamParams(ignore_eos=True), [ids + [endoftext, 151645]])
    assert end == ("length", None, False)


def test_bad_id_raises_and_the_stream_goes_on(tok, ref):
    ids = ref.encode("fine text", add_special_tokens=False).ids
    stream = TextStream(tok, StreamParams(stop=["zzz"], max_tokens=10))
    first = stream.push(ids[:1])
    with pytest.raises(ValueError):
        stream.push([ids[1], -1])
    with pytest.raises(ValueError):
        stream.push([10**9])
    rest = stream.push(ids[1:])
    assert first.deltas[0].content + rest.deltas[0].content == "fine text" and stream.num_tokens == len(ids)


def test_prompt_closed_think_means_all_content(tok, ref):
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = ref.encode("Hello </think> there", add_special_tokens=False).ids
    (content, reasoning, _, _), _ = run(tok, StreamParams(reasoning_parser="qwen3"), [[i] for i in ids],
                                        prompt_ids=ref.encode(prompt, add_special_tokens=False).ids)
    assert (content, reasoning) == ("Hello  there", "")  # a stray end tag is markup: never content
    (content, reasoning, _, _), _ = run(tok, StreamParams(reasoning_parser="qwen3"), [[i] for i in ids],
                                        prompt_text="<|im_start|>assistant\n<think>\n")
    assert (content, reasoning) == ("there", "Hello")


HARMONY = ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>")


@functools.lru_cache(maxsize=None)
def special_markers_vocabulary():
    """Qwen3 with <think>/</think> made special and gpt-oss's harmony markers added as special tokens:
    skip_special_tokens would drop every one of them."""
    path = vocabulary("qwen3_dir")
    spec = json.loads((path / "tokenizer.json").read_text())
    for token in spec["added_tokens"]:
        if token["content"] in ("<think>", "</think>"):
            token["special"] = True
    next_id = max(t["id"] for t in spec["added_tokens"]) + 1
    for k, marker in enumerate(HARMONY):
        spec["added_tokens"].append({"id": next_id + k, "content": marker, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})
    return Tokenizer.from_spec(spec, {"eos_token": "<|return|>"})


def test_parser_special_tokens_survive_skip_special_tokens():
    tok = special_markers_vocabulary()
    ids = tok.encode("<think>\nplan\n</think>\n\nanswer")
    (content, reasoning, _, _), _ = run(tok, StreamParams(reasoning_parser="qwen3"), [[i] for i in ids])
    assert (reasoning, content) == ("plan", "answer")
    (content, reasoning, _, _), _ = run(tok, StreamParams(), [[i] for i in ids])
    assert content == "\nplan\n\n\nanswer"  # without a parser the specials follow skip_special_tokens


def test_gpt_oss_harmony_channels_with_special_markers():
    tok = special_markers_vocabulary()
    assert all(tok.token_to_id(m) in tok.special_ids for m in HARMONY)
    text = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')
    ids = tok.encode(text)
    for params in (StreamParams(tool_parser="openai"),
                   StreamParams(reasoning_parser="openai_gptoss", tool_parser="openai")):
        results = {json.dumps(run(tok, params, steps)[0]) for steps in splits(ids, [4, 9, 21])}
        assert len(results) == 1
        content, reasoning, calls, end = json.loads(results.pop())
        assert (content, reasoning) == ("", "Need the weather.")
        assert calls == {"0": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    final = tok.encode("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
                       "<|message|>Sunny.<|return|>")
    (content, reasoning, _, end), _ = run(tok, StreamParams(reasoning_parser="openai_gptoss"), [[i] for i in final])
    assert (reasoning, content, end) == ("Think.", "Sunny.", ("stop", None, False))


def test_tool_calls_finish_with_tool_calls(tok, ref):
    text = ('<think>\nweather?\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><|im_end|>')
    ids = ref.encode(text, add_special_tokens=False).ids
    params = StreamParams(reasoning_parser="qwen3", tool_parser="hermes",
                          tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {
                              "type": "object", "properties": {"city": {"type": "string"}}}}}])
    results = {json.dumps(run(tok, params, steps)[0]) for steps in splits(ids, [3, 17, 40])}
    assert len(results) == 1
    content, reasoning, calls, end = json.loads(results.pop())
    assert reasoning == "weather?" and content == ""
    assert calls == {"0": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert end == ["tool_calls", None, False]


CALL_PIECES = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
               '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>', "\n", "Sure.", "<tool_call>", "{",
               '"}', "</tool_call>", "<think>\nhmm\n</think>\n\n", " 日本", "🧑‍🚀",
               # an argument string of code: escapes split across tokens, quotes, non-ASCII, a raw tab (invalid)
               '<tool_call>\n{"name": "write", "arguments": {"text": "def f():\\n    return '
               '\\"é\\" \\u00e9 日本 \\\\"}}\n</tool_call>',
               '<tool_call>\n{"name": "write", "arguments": {"text": "a\tb"}}\n</tool_call>']


def test_tool_calls_agree_across_groupings_and_with_whole_parse(tok, ref):
    """Whatever the grouping (one token, k, random: the last brace of a call arriving with the next
    tokens), the calls are those of the whole-text parse; a call with no arguments streams "{}"."""
    from tokworker.parsers.reasoning import get_reasoning_parser
    from tokworker.parsers.tools import get_tool_parser
    eos = tok.token_to_id(tok.eos_token)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.sampled_from(CALL_PIECES), max_size=6), st.lists(st.integers(0, 1000), max_size=6),
           st.booleans())
    def check(pieces, cuts, with_eos):
        ids = ref.encode("".join(pieces), add_special_tokens=False).ids + ([eos] if with_eos else [])
        params = StreamParams(reasoning_parser="qwen3", tool_parser="hermes")
        results = {json.dumps(run(tok, params, steps)[0]) for steps in splits(ids, cuts)}
        assert len(results) == 1
        content, reasoning, calls, (finish, _, _) = json.loads(results.pop())
        text = ref.decode(ids, skip_special_tokens=True)
        # a call opened inside the unclosed block ends it, in the whole-text parse as in the stream
        whole_reasoning, whole_content = get_reasoning_parser("qwen3", tool_parser=get_tool_parser("hermes")).parse(text)
        whole_calls = get_tool_parser("hermes").parse(whole_content or "")[1]
        assert (reasoning or None) == whole_reasoning
        assert [(c["name"], c["arguments"]) for c in calls.values()] == \
            [(c["function"]["name"], c["function"]["arguments"]) for c in whole_calls]
        if with_eos:
            assert finish == ("tool_calls" if whole_calls else "stop")
        if '"now"' in json.dumps(calls):
            assert any(c["arguments"] == "{}" for c in calls.values() if c["name"] == "now")

    check()


def test_deepseek_reasoning_and_tool_call_markers_on_the_real_vocabulary():
    path = vocabulary("deepseek")
    tok = Tokenizer.from_file(path, {"eos_token": "<｜end▁of▁sentence｜>"})
    text = ("Weather in Paris needed.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
            "get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>")
    ids = tok.encode(text)
    params = StreamParams(reasoning_parser="deepseek_r1", tool_parser="deepseek_v3")
    prompt = "<｜User｜>Weather in Paris?<｜Assistant｜><think>\n"
    results = {json.dumps(run(tok, params, steps, prompt_text=prompt)[0]) for steps in splits(ids, [5, 11, 30])}
    assert len(results) == 1
    content, reasoning, calls, end = json.loads(results.pop())
    assert reasoning == "Weather in Paris needed." and content == ""
    assert calls == {"0": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert end == ["tool_calls", None, False]

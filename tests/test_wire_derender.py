"""vLLM's derender format (tokworker.wire.derender): the chunks of a streamed sequence, one per call, say
what the whole body says, by construction.

The property: one TextStream's updates feed the derender writer and its whole gatherer at once (as the
worker does for whichever the call asked), grouped into engine steps however hypothesis likes, some steps
answered late (their choice rides with the next call's, as the pool merges a hung worker's late output) and
some calls answered by a step that said nothing. Each call's answer is `{"chunk", "stream_state"}`, its chunk
valid as the openai SDK's type; the chunks' choices, joined as a client joins them, and the whole body
agree on the text, the reasoning, every tool call with its id, the logprob tokens (and completions'
offsets), the usage and the finish. tests/test_api_render.py and tests/test_beside_vllm_render.py drive the
same through the server (the second beside vLLM's own, whose models judge every body).
Covers tokworker.wire.derender."""

from __future__ import annotations

import json

from hypothesis import example, given, settings, strategies as st
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from tests.test_wire_formats import SCRIPTS, TOKENIZER, logprobs_for
from tokworker.protocol.deltas import ChunkFormat, StreamParams, Usage
from tokworker.stream.state import TextStream
from tokworker.wire import home
from tokworker.wire.derender import STATE, vllm_error

APIS = ("derender_chat", "derender_completions")


def both(api: str, script: int, sizes: list[int], late: list[bool], after: int, *, eos: bool = True,
         max_tokens=None):
    """(each call's answer, the whole body) of one stream's updates, written both ways at once. A late step's
    call is answered with nothing (the pool's empty update for a share it returned without) and its choice
    rides with the next call's; a step that ends the stream is never late (the pool waits for it). `after`:
    calls for the sequence after the text side ended it (a stop string), answered with nothing."""
    text, extra = SCRIPTS[script]
    if api == "derender_completions":              # the completions API runs no parsers
        extra = {key: value for key, value in extra.items() if key == "stop"}
    ids = TOKENIZER.encode(text) + ([TOKENIZER.eos_token_ids[0]] if eos else [])
    params = StreamParams(**extra, logprobs=2, max_tokens=max_tokens)
    fmt = ChunkFormat(id=home(api).id_prefix + "1", model="m", created=1700000000, api=api, index=0)
    stream = TextStream(TOKENIZER, params, prompt_ids=[1, 2, 3])
    writer = home(api).writer(fmt, params, [1, 2, 3], TOKENIZER)
    whole = home(api).whole(fmt, params, [1, 2, 3], TOKENIZER)
    lps = logprobs_for(ids)
    answers, held, at, k = [], b"", 0, 0
    while not stream.done:
        size = sizes[k % len(sizes)]
        if at < len(ids):
            step = ids[at:at + size]
            update = stream.push(step, lps[at:at + size])
            at += len(step)
        else:
            step, update = [], stream.finish()
        whole.add(update, step)
        held += writer.sse(update)
        if stream.done or not late[k % len(late)]:
            answers.append(home(api).call(fmt, held, None))
            held = b""
        else:
            answers.append(home(api).call(fmt, b"", None))
        k += 1
    answers += [home(api).call(fmt, b"", None)] * after
    counted = Usage(prompt_tokens=3, completion_tokens=at)
    answers.append(home(api).call(fmt, None, counted))  # the usage-only chunk: the engine's counts
    return [json.loads(answer) for answer in answers], json.loads(home(api).body(fmt, [whole.fragment()], [counted]))


def said_streamed(api: str, answers: list[dict]) -> dict:
    """What a client joins from the calls' chunks (each valid as the openai SDK's chunk)."""
    text, reasoning, calls, tokens, offsets, usage, finish, roles = "", "", {}, [], [], None, None, 0
    for answer in answers:
        assert answer["stream_state"] == json.loads(STATE)
        chunk = answer["chunk"]
        if api == "derender_chat":
            ChatCompletionChunk.model_validate(chunk)
        else:       # the SDK's Completion is a whole response: its finish_reason is never null
            Completion.model_validate({**chunk, "choices": [{**c, "finish_reason": c["finish_reason"] or "stop"}
                                                            for c in chunk["choices"]]})
        usage = chunk["usage"] or usage
        for choice in chunk["choices"]:
            finish = choice["finish_reason"] or finish
            if api == "derender_completions":
                text += choice["text"]
                tokens += choice["logprobs"]["tokens"] if choice["logprobs"] else []
                offsets += choice["logprobs"]["text_offset"] if choice["logprobs"] else []
                continue
            delta = choice["delta"]
            roles += delta.get("role") == "assistant"
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or ():
                entry = calls.setdefault(call["index"], [None, "", ""])
                entry[0] = entry[0] or call.get("id")
                entry[1] += call["function"].get("name") or ""
                entry[2] += call["function"].get("arguments") or ""
            tokens += [e["token"] for e in (choice["logprobs"] or {}).get("content") or ()]
    if api == "derender_chat":
        assert roles == 1                           # the role once, on the sequence's first choice
    return {"text": text, "reasoning": reasoning, "calls": list(calls.values()), "tokens": tokens,
            "offsets": offsets, "usage": usage, "finish": finish}


def said_whole(api: str, body: dict) -> dict:
    choice = body["choices"][0]
    if api == "derender_completions":
        return {"text": choice["text"], "reasoning": "", "calls": [], "tokens": choice["logprobs"]["tokens"],
                "offsets": choice["logprobs"]["text_offset"], "usage": body["usage"],
                "finish": choice["finish_reason"]}
    message = choice["message"]
    assert "reasoning_content" not in message               # vLLM 0.33's name, as the chunks write it
    return {"text": message["content"] or "", "reasoning": message.get("reasoning") or "",
            "calls": [[c["id"], c["function"]["name"], c["function"]["arguments"]]
                      for c in message.get("tool_calls", ())],
            "tokens": [e["token"] for e in choice["logprobs"]["content"]], "offsets": [], "usage": body["usage"],
            "finish": choice["finish_reason"]}


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(APIS), st.sampled_from(range(len(SCRIPTS))), st.lists(st.integers(1, 9), min_size=1, max_size=5),
       st.lists(st.booleans(), min_size=1, max_size=4), st.integers(0, 2), st.booleans(),
       st.sampled_from([None, 6, 40]))
@example("derender_chat", 2, [1], [False], 0, True, None)         # one token a call, calls with ids
@example("derender_chat", 2, [2], [True], 0, True, None)          # every step late but the last
@example("derender_completions", 0, [3], [False], 2, True, None)  # a stop string, then calls past it
def test_the_calls_say_what_the_whole_body_says(api, script, sizes, late, after, eos, max_tokens):
    answers, body = both(api, script, sizes, late, after, eos=eos, max_tokens=max_tokens)
    streamed, whole = said_streamed(api, answers), said_whole(api, body)
    assert whole == streamed
    for call in whole["calls"]:
        assert call[0].startswith("call_")


def test_a_late_step_rides_with_the_next_call_as_a_second_choice():
    fmt = ChunkFormat(id="r", model="m", created=1, api="derender_chat")
    writer = home("derender_chat").writer(fmt, StreamParams())
    stream = TextStream(TOKENIZER, StreamParams())
    late = writer.sse(stream.push(TOKENIZER.encode("Hello")))
    now = writer.sse(stream.push(TOKENIZER.encode(" world")))
    choices = json.loads(home("derender_chat").call(fmt, late + now, None))["chunk"]["choices"]
    assert [c["delta"] for c in choices] == [{"role": "assistant", "content": "Hello"}, {"content": " world"}]


def test_errors_are_vllms_body_before_and_during_a_stream():
    fmt = ChunkFormat(id="r", model="m", created=1, api="derender_chat")
    for api in APIS:
        body = home(api).error_body(400, "invalid", "unknown derender stream", "stream_state")
        assert json.loads(body) == {"error": {"message": "unknown derender stream", "type": "BadRequestError",
                                              "param": "stream_state", "code": 400}}
        assert home(api).error_event(fmt, 400, "invalid", "unknown derender stream", "stream_state") == body
        assert home(api).tail(fmt, [], True) == b""
    assert json.loads(vllm_error(503, "its worker died", None))["error"]["type"] == "Service Unavailable"

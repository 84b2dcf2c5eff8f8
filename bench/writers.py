"""Wire-format writers: the cost per token of each (tokworker.wire) beside chat chunks, on the same stream.

One stream of real Qwen3 ids at a time, one token per engine step as a worker steps it, best of several
rounds of process CPU time, the variants interleaved round by round. `push_us` is TextStream alone; each
writer row adds that writer's `sse` on every update (`writer_us` = the difference). `ratio_vs_chat` =
the whole step with chat chunks / this row's whole step (push and writer: a difference of two noisy
timings is no base for a ratio; below 1 the row costs more than chat chunks). The logprobs rows are chat chunks
with entries (0 = sampled token only, 5 = top 5) and with include_usage: their push pays for the entries
(and, with a reasoning parser, for counting reasoning tokens one id at a time), so their writer_us is
measured against the plain push.
"""

from __future__ import annotations

from bench.stream import ANSWER, REASONING, TOOL_CALL, _best, _vocabulary

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string"}}}}}]
WRITERS = ["chat", "completions", "responses", "anthropic"]


def run(quick: bool = False, model_dirs=()) -> list[dict]:
    from tokworker.protocol.deltas import ChunkFormat, StreamParams
    from tokworker.wire import writer_for
    from tokworker.stream.state import TextStream
    from tokworker.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(_vocabulary())
    rounds = 3 if quick else 15
    cases = {
        "plain": ((ANSWER * (4 if quick else 20)), {}),
        "reasoning + tool call": ("<think>\n" + REASONING * (2 if quick else 10) + "</think>\n\n"
                                  + ANSWER * (1 if quick else 5) + TOOL_CALL,
                                  {"reasoning_parser": "qwen3", "tool_parser": "hermes", "tools": TOOLS}),
    }
    rows = []
    for case, (text, extra) in cases.items():
        ids = tokenizer.encode(text) + [tokenizer.eos_token_ids[0]]
        steps = [[token_id] for token_id in ids]
        prompt = [1] * 100

        def scored(top):
            return [([token_id], [(-0.5, [((token_id + j) % tokenizer.vocab_size, -1.0 - j) for j in range(top)])])
                    for token_id in ids]

        def variant(api, top=None, usage=False):
            params = StreamParams(**extra, logprobs=top, include_usage=usage)
            batches = scored(top) if top is not None else None

            def once():
                stream = TextStream(tokenizer, params, prompt_ids=prompt, prompt_text="<|im_start|>assistant\n")
                push = stream.push
                if api is None:
                    for step in steps:
                        push(step)
                    return
                sse = writer_for(ChunkFormat(id="r-1", model="m", created=1, api=api), params, prompt, tokenizer).sse
                if batches is None:
                    for step in steps:
                        sse(push(step))
                else:
                    for step, logprobs in batches:
                        sse(push(step, logprobs))
            return once

        variants = {"push": variant(None), **{api: variant(api) for api in WRITERS},
                    "chat, logprobs=0": variant("chat", 0), "chat, logprobs=5": variant("chat", 5),
                    "chat, include_usage": variant("chat", usage=True)}
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(rounds):                # interleaved: every variant sees the same machine load
            for name, once in variants.items():
                best[name] = min(best[name], _best(once, 1))
        measured = {name: seconds / len(ids) * 1e6 for name, seconds in best.items()}
        push_us = measured.pop("push")
        for writer, total in measured.items():
            rows.append({"case": f"{case}: {writer}", "tokens": len(ids), "push_us": round(push_us, 3),
                         "us_per_token": round(total, 3), "writer_us": round(max(total - push_us, 0.0), 3),
                         "ratio_vs_chat": round(measured["chat"] / total, 3)})
    return rows

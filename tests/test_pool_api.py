"""The pool's stateless API against the in-process engine, and its promises under pressure: bounded
(Overloaded instead of growing), timed out (a stopped worker), and fenced (a step that timed out fails its
streams, while the other streams are rebuilt and go on exactly)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import uvloop

from tokworker.frontend import InvalidRequest, Overloaded, PoolError, RequestTimeout, TokenizerPool
from tokworker.protocol.deltas import StreamParams, StreamUpdate

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a word.",
                                           "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                                                          "required": ["word"]}}}]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Define 'naïve' <|im_end|>"},
            {"role": "assistant", "content": "Without guile."}, {"role": "user", "content": "日本語で?"}]


def test_render_encode_decode_compile_equal_the_in_process_engine(tokenizer):
    texts = ["", "Hello world", "naïve café 🧑‍🚀", "<|im_start|>user\nhi<|im_end|>", "  spaces  \n\n tabs\t"]

    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as pool:
            for tools in (None, TOOLS):
                prompt = await pool.render(MESSAGES, tools=tools, return_text=True, enable_thinking=False)
                assert prompt.ids == tokenizer.apply_chat_template(MESSAGES, tools=tools, add_generation_prompt=True,
                                                                   enable_thinking=False)
                assert prompt.text == tokenizer.apply_chat_template(MESSAGES, tools=tools, tokenize=False,
                                                                    add_generation_prompt=True, enable_thinking=False)
            assert (await pool.render(MESSAGES)).text is None
            assert await pool.encode(texts) == [tokenizer.encode(t) for t in texts]
            assert await pool.encode(texts[3], split_special_tokens=True) == tokenizer.encode(
                texts[3], split_special_tokens=True)
            ids = [tokenizer.encode(t) for t in texts]
            assert await pool.decode(ids) == [tokenizer.decode(i) for i in ids]
            assert await pool.decode(ids[3], skip_special_tokens=True) == tokenizer.decode(ids[3],
                                                                                           skip_special_tokens=True)
            frozen = [stats.gc_frozen for stats in await pool.stats()]
            assert min(frozen) > 10_000              # the loaded tokenizer sits in the permanent generation
            constraint = await pool.compile(pattern="(yes|no|maybe)!")
            assert sum(stats.gc_frozen for stats in await pool.stats()) > sum(frozen)   # and the trie joins it
            for word in ("yes!", "maybe!"):
                state, sampled = constraint.initial_state, []
                for token in tokenizer.encode(word) + tokenizer.eos_token_ids:
                    result = (await pool.guide({word: (constraint, state, sampled)}))[word]
                    assert result.mask[token >> 3] >> (token & 7) & 1
                    state, sampled = result.state, [token]
                assert result.accepting
            forced = await pool.compile(tools=TOOLS, tool_name="lookup")
            assert "lookup" in forced.pattern and forced.id != constraint.id
            again = await pool.compile(tools=TOOLS, tool_name="lookup")
            assert (again.id, again.initial_state) == (forced.id, forced.initial_state)
            with pytest.raises(InvalidRequest):
                await pool.compile(pattern="(unclosed")
            with pytest.raises(InvalidRequest) as forbidden:
                await pool.render(MESSAGES, chat_template="{{ messages }}")
            assert forbidden.value.code == "forbidden"
            with pytest.raises(InvalidRequest):
                await pool.render([])                                   # an empty conversation
            with pytest.raises(InvalidRequest):
                await pool.render([{"role": "user", "content": object()}])   # not msgpack-able

    uvloop.run(main())


def test_request_templates_when_the_operator_allows_them():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, allow_request_templates=True) as pool:
            reply = await pool.render([{"role": "user", "content": "x"}], return_text=True,
                                      chat_template="{% for m in messages %}[{{ m.content }}]{% endfor %}")
            assert reply.text == "[x]"
            assert "request_templates" in pool.info.capabilities
            runaway = "{% for i in range(10**7) %}{% for j in range(10**7) %}{% endfor %}{% endfor %}"
            started = time.monotonic()
            with pytest.raises(InvalidRequest) as stopped:
                await pool.render([{"role": "user", "content": "x"}], chat_template=runaway)
            assert stopped.value.code == "template_error" and time.monotonic() - started < 10
            assert await pool.encode("still here")

    uvloop.run(main())


def test_a_model_dir_that_cannot_load_fails_fast(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")

    async def main():
        started = time.monotonic()
        with pytest.raises(PoolError) as failed:
            await TokenizerPool.spawn(tmp_path, workers=1)
        assert failed.value.code == "worker_failed" and time.monotonic() - started < 30

    uvloop.run(main())


def test_a_full_pool_says_overloaded_instead_of_queueing():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, max_inflight=4) as pool:
            calls = [asyncio.ensure_future(pool.encode(f"text {i}")) for i in range(40)]
            results = await asyncio.gather(*calls, return_exceptions=True)
            refused = [r for r in results if isinstance(r, Overloaded)]
            served = [r for r in results if isinstance(r, list)]
            assert len(served) >= 4 and len(refused) >= 30 and len(served) + len(refused) == 40
            assert await pool.encode("after the burst")                 # and it recovers

    uvloop.run(main())


def test_a_stopped_worker_means_timeouts_and_a_fenced_stream(tokenizer):
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1, request_timeout=1.0) as pool:
            ids = {name: tokenizer.encode(f"stream {name} says hello to everyone") for name in "ab"}
            for name in "ab":
                await pool.open_stream(name, StreamParams())
            first = await pool.step({"a": ids["a"][:3], "b": ids["b"][:3]})
            pid = pool.launcher.pids[0]
            os.kill(pid, signal.SIGSTOP)
            try:
                with pytest.raises(RequestTimeout):
                    await pool.encode("nobody answers")
                with pytest.raises(RequestTimeout):
                    await pool.step({"a": ids["a"][3:5]})                # its state is unknown now: fenced off
            finally:
                os.kill(pid, signal.SIGCONT)
            assert (await pool.step({"a": [1]}))["a"].finish_reason == "error"
            rest = await pool.step({"b": ids["b"][3:]}, finish=["b"])   # b was rebuilt from its log
            text = "".join(d.content for u in (first["b"], rest["b"]) for d in u.deltas)
            assert text == tokenizer.decode(ids["b"])
            assert pool.links[0].recoveries == 1
            return pool

    uvloop.run(main())


def test_connect_to_running_workers_by_endpoint():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=2) as spawned:
            endpoints = [link.endpoint for link in spawned.links]
            async with await TokenizerPool.connect(endpoints) as pool:
                assert len(pool.links) == 2
                assert await pool.encode("shared workers") == await spawned.encode("shared workers")
                await pool.open_stream("same-id")
                await spawned.open_stream("same-id")                  # sessions keep clients apart
                a = await pool.step({"same-id": [40, 41]})
                b = await spawned.step({"same-id": [50]})
                assert a["same-id"] != b["same-id"] and b["same-id"] != StreamUpdate()

    uvloop.run(main())

"""The parsers a worker gives streams that name none: the operator's, else what the model's own chat template
implies (parsers_for_template), chosen at start-up. The implied reasoning parser applies only to streams
opened with their prompt, whose last turn says where generation starts.
Covers tokworker.worker.defaults."""

import asyncio

from tokworker import Tokenizer
from tokworker.frontend import TokenizerPool
from tokworker.parsers import parsers_for_template
from tokworker.protocol.deltas import StreamParams
from tokworker.worker.options import DEFAULT_MODEL_DIR

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
REPLY = '<think>Look it up.</think>Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def _kinds(update):
    return [("reasoning" if d.reasoning_content else "tool" if d.tool_calls else "content") for d in update.deltas]


def test_the_bundled_template_implies_hermes_and_qwen3():
    assert parsers_for_template(Tokenizer.from_dir(DEFAULT_MODEL_DIR).chat_template) == ("hermes", "qwen3")


def test_implied_parsers_apply_to_prompted_streams_and_the_operator_overrides_them():
    tok = Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Weather?"}], tools=TOOLS,
                                     add_generation_prompt=True)
    reply = tok.encode(REPLY) + list(tok.eos_token_ids)

    async def main():
        async with await TokenizerPool.spawn(DEFAULT_MODEL_DIR, workers=1) as pool:
            assert (pool.info.tool_parser, pool.info.reasoning_parser) == ("hermes", "qwen3")
            await pool.open_stream("prompted", StreamParams(tools=TOOLS), prompt_ids=prompt)
            await pool.open_stream("bare", StreamParams())                 # no prompt: no implied reasoning
            updates = await pool.step({"prompted": reply, "bare": tok.encode("<think>plain</think>")})
            assert _kinds(updates["prompted"]) == ["reasoning", "content", "tool"]
            assert [d.content for d in updates["bare"].deltas] == ["<think>plain</think>"]
        async with await TokenizerPool.spawn(DEFAULT_MODEL_DIR, workers=1, tool_parser="none",
                                             reasoning_parser="none") as pool:
            await pool.open_stream("off", StreamParams(tools=TOOLS), prompt_ids=prompt)
            update = (await pool.step({"off": reply}))["off"]
            assert "".join(d.content for d in update.deltas) == REPLY

    asyncio.run(main())

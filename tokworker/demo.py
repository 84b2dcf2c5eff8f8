"""`tokworker demo`: one whole chat turn through a local pool on the bundled tokenizer, no arguments needed.

It renders a conversation with a tool through the chat template, prints the prompt and its token count,
then plays the engine: a scripted reply (reasoning, then a hermes tool call) is encoded to ids and pushed
a few ids per engine step, and the OpenAI chunks the pool streams back are printed as JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import time

import msgspec

from tokworker.protocol.deltas import StreamParams

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather in Paris right now?"}]
REPLY = ("<think>\nThe user wants the current weather in Paris. I have a get_weather tool, so I will call it with "
         "the city.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
         "\"unit\": \"celsius\"}}\n</tool_call>")
STEP_IDS = 3                   # ids per engine step (an engine emits one per step per request; 3 shows batching)


def chunk(request_id: str, created: int, delta: dict, finish_reason: str | None = None) -> str:
    return json.dumps({"id": request_id, "object": "chat.completion.chunk", "created": created,
                       "model": "tokworker-demo", "choices": [{"index": 0, "delta": delta,
                                                              "finish_reason": finish_reason}]}, ensure_ascii=False)


async def run_demo(model_dir: str | None = None, workers: int = 2, out=print) -> list[dict]:
    """Run the turn and return the delta dicts it streamed (what a test checks)."""
    from tokworker.frontend import TokenizerPool

    async with await TokenizerPool.spawn(model_dir, workers=workers) as pool:
        prompt = await pool.render(MESSAGES, tools=TOOLS, return_text=True)
        out("=== rendered prompt ===")
        out(prompt.text)
        out(f"=== {len(prompt.ids)} prompt tokens on {len(pool.links)} workers ===")
        reply_ids = await pool.encode(REPLY) + pool.info.eos_token_ids[:1]
        request_id, created = "chatcmpl-demo", int(time.time())
        params = StreamParams(reasoning_parser="qwen3", tool_parser="hermes", tools=TOOLS)
        await pool.open_stream(request_id, params, prompt_ids=prompt.ids, prompt_text=prompt.text, buffer=False)
        out(f"=== streaming {len(reply_ids)} generated tokens, {STEP_IDS} per engine step ===")
        out(chunk(request_id, created, {"role": "assistant", "content": ""}))
        streamed = []
        for start in range(0, len(reply_ids), STEP_IDS):
            update = (await pool.step({request_id: reply_ids[start:start + STEP_IDS]}))[request_id]
            for delta in update.deltas:
                data = msgspec.to_builtins(delta)
                streamed.append(data)
                out(chunk(request_id, created, data))
            if update.finish_reason is not None:
                out(chunk(request_id, created, {}, update.finish_reason))
                break
        else:
            update = (await pool.step({}, finish=[request_id]))[request_id]
            for delta in update.deltas:
                streamed.append(msgspec.to_builtins(delta))
                out(chunk(request_id, created, streamed[-1]))
            out(chunk(request_id, created, {}, update.finish_reason or "stop"))
        out("data: [DONE]")
        return streamed


def main(model_dir: str | None = None) -> int:
    try:
        import uvloop
        uvloop.run(run_demo(model_dir))
    except ImportError:
        asyncio.run(run_demo(model_dir))
    return 0

"""`tokworker demo`: the front door on the replay engine, read with the `openai` SDK, in one command.

It starts `tokworker api`'s server in this process (a pool of tokenizer workers on the bundled tokenizer,
or --model-dir, and the replay engine) on a free loopback port, says that the reply is scripted, then asks
a chat with a tool through the openai SDK, as any client would: the rendered prompt's token count (from
/tokenize), every streamed chunk as a JSON line, and what the SDK assembled. The engine plays a fixed reply
(reasoning, then a hermes tool call) one token per step: the text, reasoning and tool call you see were
parsed from those ids by the workers.
"""

from __future__ import annotations

import asyncio
import json

from tokworker.api.options import ApiOptions

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
MODEL = "tokworker-demo"


def scripted(prompt_text: str, sampling) -> str | None:
    """The demo's engine script: this one reply, whatever was asked (None for a constrained request)."""
    return None if sampling.guide is not None else REPLY


async def run_demo(model_dir: str | None = None, chat_template: str | None = None, out=print) -> list[dict]:
    """Serve, ask, print; return the chunks' delta dicts (what a test checks)."""
    import openai

    from tokworker.api.run import serve_http
    from tokworker.engines.replay import ReplayEngine

    started = asyncio.get_running_loop().create_future()
    spawn = dict(model_dir=model_dir, workers=2, chat_template=chat_template)
    server = asyncio.ensure_future(serve_http(spawn, ApiOptions(served_model_name=[MODEL]),
                                              ReplayEngine(scripted, step_interval=0.005), port=0,
                                              ready=started.set_result, signals=False))
    await asyncio.wait([started, server], return_when=asyncio.FIRST_COMPLETED)
    if server.done():
        server.result()                                  # a start-up failure: raise it
    port = started.result()
    url = f"http://127.0.0.1:{port}/v1"
    out(f"=== tokworker api at {url}, engine: replay. The reply below is SCRIPTED, not generated: the replay "
        f"engine plays fixed token ids, one per step; tokworker's workers render the prompt and turn those ids "
        f"into the chunks you see ===")
    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
    try:
        async with client:
            deltas = await _ask(client, out)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    return deltas


async def _ask(client, out) -> list[dict]:
    import aiohttp

    async with aiohttp.ClientSession() as http:                     # vLLM's /tokenize, beside /v1
        async with http.post(str(client.base_url).removesuffix("v1/") + "tokenize",
                             json={"messages": MESSAGES, "tools": TOOLS}) as response:
            tokens = await response.json()
    out(f"=== the chat template rendered the conversation and its tool into {tokens['count']} prompt tokens ===")
    out(f"=== POST /v1/chat/completions (stream) with tools={[t['function']['name'] for t in TOOLS]} ===")
    deltas, calls, reasoning = [], {}, []
    stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, stream=True)
    async for chunk in stream:
        out(json.dumps(chunk.model_dump(exclude_none=True), ensure_ascii=False))
        for choice in chunk.choices:
            delta = choice.delta.model_dump(exclude_none=True)
            deltas.append(delta)
            reasoning.append(delta.get("reasoning_content", ""))
            for call in delta.get("tool_calls", []):
                entry = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                entry["name"] += call.get("function", {}).get("name") or ""
                entry["arguments"] += call.get("function", {}).get("arguments") or ""
    out("data: [DONE]")
    out(f"=== reasoning: {''.join(reasoning)!r}")
    for call in calls.values():
        out(f"=== tool call: {call['name']}({call['arguments']})")
    return deltas


def main(model_dir: str | None = None, chat_template: str | None = None) -> int:
    import sys

    try:
        import openai  # noqa: F401
    except ImportError:
        print("tokworker demo reads the reply with the openai SDK: pip install 'tokworker[demo]'", file=sys.stderr)
        return 2
    import uvloop
    uvloop.run(run_demo(model_dir, chat_template))
    return 0

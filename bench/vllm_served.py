"""vLLM 0.33's own `vllm serve` API process beside `tokworker api`, HTTP included on both sides, in one run.

vLLM's API process (FastAPI/uvicorn, OpenAIServingChat, AsyncLLM and its output processor) runs on this
machine's CPU when its engine core is another process speaking the engine core's ZeroMQ/msgpack protocol.
Two parts here:
- the engine core: a scripted stand-in run by vLLM's python (bench/vllm_standin.py).
- `VllmServer`: `vllm serve DIR --data-parallel-size-local 0 --data-parallel-address 127.0.0.1
  --data-parallel-rpc-port PORT [FLAGS]` (one API server in this process, no local engine: it waits for a
  remote headless engine on PORT, the stand-in). DIR is a copy of tokworker's default tokenizer folder (the
  same vocabulary and chat template as the front door's replay engine) with a small config.json, as vLLM
  needs one (no weights).
- `run`, two parts, each with servers of its own (bench/front_door.py's `tokworker api` on the replay
  engine, same reply, same 20 ms step, beside a VllmServer playing the same ids):
  - plain replies (`_plain`): `tokworker api` (`--no-direct-streaming`, and direct streaming) and vLLM's
    server take turns, three rounds each per S, each keeping its best round; S concurrent aiohttp SSE
    clients read each stream to its end (bench/front_door.py's `_streams`, counting streamed tokens from
    the text, since a server that falls behind may merge several tokens into one event). The API
    process's CPU (all its threads; tokworker's replay engine thread left out) per streamed token, in the
    window where all S streams run.
  - reasoning + tool calls (`_reasoning_tools`, issue 28): a Qwen3 reply (a think block, then hermes
    <tool_call> JSON; `tool_reply`), two tools in every request, vLLM with `--enable-auto-tool-choice
    --tool-call-parser hermes --reasoning-parser qwen3` beside tokworker's default (direct streaming) with
    the same two parsers named. One streamed reply from each must carry the expected calls before anything
    is measured (else the row says what came back). Then as above, but the tokens are the ids each engine
    played in the window (its counter): reasoning and tool-call parsing turn tokens into text no table maps
    back.
The first text of long chats, beside the same server: bench/vllm_first_text.py.

`python -m bench --only vllm_served --vllm-python /work/venv/vllm/bin/python [--quick]`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.vllm_standin import CONFIG

SERVED_MODEL = "bench"                  # the name bench/front_door.py's clients ask for


# --- vLLM's API server (this project's python) --------------------------------------------------------------

def model_folder() -> Path:
    """tokworker's default tokenizer folder copied beside a config.json vLLM takes as a model."""
    from tokworker.worker.options import DEFAULT_MODEL_DIR

    folder = Path(tempfile.mkdtemp(prefix="tokworker-vllm-served-"))
    for path in Path(DEFAULT_MODEL_DIR).iterdir():
        shutil.copy(path, folder / path.name)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return folder


class VllmServer:
    """The stand-in engine core and `vllm serve` (one API server, the remote engine the stand-in) on free
    loopback ports: `url`, `pid` (the API process), `stop()`."""

    def __init__(self, python: str, script: list[int], step_s: float, flags: tuple[str, ...] = (),
                 counter: str | None = None, timeout: float = 300):
        from bench.vllm_render import environment
        from tools.llama_server import free_port, wait_healthy

        self.folder = model_folder()
        (self.folder / "script.json").write_text(json.dumps(script))
        rpc_port, port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.TemporaryFile()
        env = environment()
        self.engine = subprocess.Popen([python, str(Path(__file__).resolve().with_name("vllm_standin.py")), str(rpc_port),
                                        str(self.folder / "script.json"), str(step_s),
                                        *([counter] if counter else [])],
                                       env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.server = subprocess.Popen(
            [python, "-m", "vllm.entrypoints.cli.main", "serve", str(self.folder), "--host", "127.0.0.1",
             "--port", str(port), "--served-model-name", SERVED_MODEL, "--data-parallel-size-local", "0",
             "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc_port), *flags],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.server.pid
        try:
            wait_healthy(self.url + "/v1/models", self.server, timeout)
            if self.engine.poll() is not None:
                raise RuntimeError("the stand-in engine exited")
        except RuntimeError:
            self.stop()
            self.log.seek(0)
            raise RuntimeError("vLLM's server did not start:\n"
                               + self.log.read().decode(errors="replace")[-4000:]) from None

    def stop(self) -> None:
        from tools.llama_server import stop

        stop(self.server, 30)
        self.engine.terminate()
        self.engine.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)


# --- the driver ---------------------------------------------------------------------------------------------

def _reply_ids() -> tuple[list[int], list[int]]:
    """The front door's reply as the replay engine plays it (its ids, then the eos), and the length of the
    text the first k+1 ids stream (a token still mid-character streams nothing yet)."""
    from bench.front_door import TEXT
    from tokworker import Tokenizer
    from tokworker.worker.options import DEFAULT_MODEL_DIR

    tokenizer = Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    ids = tokenizer.encode(TEXT)
    ends, text = [], ""
    for k in range(len(ids)):
        text = tokenizer.decode(ids[:k + 1]).rstrip("\ufffd")
        ends.append(len(text))
    return ids + list(tokenizer.eos_token_ids[:1]), ends


async def _one_text(url: str, tokens: int) -> str:
    """One streamed chat's content, for `same_text`."""
    import aiohttp

    body = {"model": SERVED_MODEL, "stream": True, "max_tokens": tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Stream 0, please."}]}
    text = []
    async with aiohttp.ClientSession() as session, session.post(url + "/v1/chat/completions", json=body) as response:
        async for line in response.content:
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


def run(quick: bool = False, model_dirs=(), python: str | None = None) -> list[dict]:
    if not python:
        return [{"case": "skipped", "reason": "no --vllm-python given"}]
    return _plain(quick, python) + _reasoning_tools(quick, python)


def _best_round(found: list[dict], count: int) -> dict:
    """The round of least API CPU per token among those that measured a real window: at least 10 tokens a
    stream, and streamed over at least half the steps they took (a client starved on a busy machine reads
    a whole window of buffered events at once, in which the server spent nothing)."""
    from bench.front_door import STEP_S

    valid = [r for r in found if r["window_tokens"] >= 10 * count
             and r["window_s"] >= 0.5 * STEP_S * r["window_tokens"] / count]
    return min(valid or found, key=lambda r: r["api_us_per_token"])


def _ratio(theirs: float, ours: float) -> float | None:
    return round(theirs / ours, 2) if ours > 0 else None


def _plain(quick: bool, python: str) -> list[dict]:
    """The plain reply (no tools, no reasoning) at 1-1,024 streams: vLLM, tokworker forwarded and direct."""
    import asyncio

    from bench.front_door import STEP_S, _children, _server, _streams

    counts = [1, 64, 256] if quick else [1, 64, 256, 1024]
    tokens = 40 if quick else 150           # per stream; 1,024 streams get more (their start takes seconds)
    script, ends = _reply_ids()
    try:
        vllm = VllmServer(python, script, STEP_S)
    except RuntimeError as error:
        return [{"case": "failed", "reason": str(error)[-2000:]}]
    started = []
    rows = []
    try:
        for flags in ((), ("--direct",)):
            started.append(_server("serve", *flags))
        (server, url, engine), (direct, direct_url, direct_engine) = started
        sides = {"vllm": (vllm.url, vllm.pid, None, None),
                 "forwarded": (url, server.pid, engine, _children(server.pid)[0]),
                 "direct": (direct_url, direct.pid, direct_engine, _children(direct.pid)[0])}
        texts = [asyncio.run(_one_text(where, 60)) for where in (vllm.url, url)]
        for count in counts:
            # the servers take turns and each keeps its best round: a shared machine's noise only adds CPU
            runs = {name: [] for name in sides}
            # longer streams for more of them: each must outlast the others' start (a loaded machine's 256
            # starts took longer than 40 tokens' 0.8 s)
            length = tokens * max(1, count // (128 if quick else 256))
            for _ in range(3):
                for name, (where, pid, skip, worker) in sides.items():
                    runs[name].append(asyncio.run(_streams(where, count, length, pid, skip, worker, ends)))
            vllm_run, forwarded, direct_run = (_best_round(found, count) for found in runs.values())
            vllm_us = vllm_run["api_us_per_token"]
            rows.append({
                "case": "streams", "streams": count, "tokens_per_stream": length,
                "vllm_served_api_us_per_token": vllm_us,
                "api_us_per_token": forwarded["api_us_per_token"],
                "worker_us_per_token": forwarded["worker_us_per_token"],
                "direct_api_us_per_token": direct_run["api_us_per_token"],
                "direct_worker_us_per_token": direct_run["worker_us_per_token"],
                "vllm_served_ratio": _ratio(vllm_us, forwarded["api_us_per_token"]),
                "vllm_served_ratio_direct": _ratio(vllm_us, direct_run["api_us_per_token"]),
                "vllm_served_ratio_tier": _ratio(vllm_us, forwarded["api_us_per_token"]
                                                 + forwarded["worker_us_per_token"]),
                "vllm_tokens_per_event": vllm_run["tokens_per_event"],
                "tokworker_tokens_per_event": forwarded["tokens_per_event"],
                "vllm_rss_mb": vllm_run["rss_mb"], "rss_mb": forwarded["rss_mb"],
                "vllm_window_tokens": vllm_run["window_tokens"], "window_tokens": forwarded["window_tokens"],
                "direct_window_tokens": direct_run["window_tokens"],
                "load_1min": round(os.getloadavg()[0], 2),
                "same_text": texts[0] == texts[1] != ""})
    finally:
        _stop(started, vllm)
    return rows


def _stop(started: list, vllm) -> None:
    """The tokworker servers of `started` ((process, url, engine) each) and vLLM's server."""
    for process, _, _ in started:
        process.terminate()
        process.wait(30)
    vllm.stop()


# --- reasoning + tool calls per streamed token (issue 28) ------------------------------------------------

# vLLM's parsers for the default template's family (Qwen3: <think> blocks, hermes <tool_call> JSON); tokworker's
# servers name the same two (bench/front_door.py's --parsers; its default template implies them anyway)
PARSER_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
REASONING = ("The user wants the weather in a few cities, so I call the weather tool once for each of them, in "
             "Celsius, then answer from what it says. ")
CITIES = ["Paris", "Lyon", "Nantes", "Lille", "Nice", "Rennes", "Dijon", "Brest"]


def tool_reply(thoughts: int, calls: int) -> tuple[str, list[dict]]:
    """A Qwen3 reply: a think block of `thoughts` sentences, then `calls` hermes tool calls; its text and the
    calls a parser must find in it.

    >>> text, calls = tool_reply(1, 1)
    >>> print(text.replace(REASONING.strip(), "..."))
    <think>
    ...
    </think>
    <BLANKLINE>
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
    </tool_call>
    >>> calls
    [{'name': 'get_weather', 'arguments': {'city': 'Paris', 'unit': 'celsius'}}]
    """
    expected = [{"name": "get_weather", "arguments": {"city": city, "unit": "celsius"}}
                for city in (CITIES * calls)[:calls]]
    text = ("<think>\n" + (REASONING * thoughts).strip() + "\n</think>\n\n"
            + "\n".join("<tool_call>\n" + json.dumps(call) + "\n</tool_call>" for call in expected))
    return text, expected


async def _parsed(url: str, body: dict) -> dict:
    """One streamed reply, joined: its reasoning, content, tool calls (name, arguments as sent) and finish."""
    import aiohttp

    reasoning, content, calls, finish = [], [], {}, None
    async with aiohttp.ClientSession() as session, \
            session.post(url + "/v1/chat/completions", json={**body, "stream": True}) as response:
        if response.status != 200:
            return {"status": response.status, "body": (await response.text())[:500]}
        async for line in response.content:
            if not line.startswith(b"data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices", ()):
                delta = choice.get("delta") or {}
                reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
                content.append(delta.get("content") or "")
                for call in delta.get("tool_calls") or ():
                    kept = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                    function = call.get("function") or {}
                    kept["name"] += function.get("name") or ""
                    kept["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
    return {"reasoning": "".join(reasoning), "content": "".join(content),
            "tool_calls": [calls[k] for k in sorted(calls)], "finish_reason": finish}


def _calls_found(parsed: dict, expected: list[dict]) -> bool:
    try:
        return [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in parsed["tool_calls"]] == expected
    except (KeyError, ValueError):
        return False


def _reasoning_tools(quick: bool, python: str) -> list[dict]:
    """API-process CPU per streamed token of a reasoning + tool-call reply, tools in every request, parsers on
    in both servers: vLLM and tokworker's default (direct streaming). Tokens are the ids the engines played
    in the window (their counters), since neither server's text maps back to them one to one."""
    import asyncio
    import mmap

    from bench.cold_prompt import TOOLS
    from bench.front_door import STEP_S, _children, _server, _streams
    from tokworker import Tokenizer
    from tokworker.worker.options import DEFAULT_MODEL_DIR

    counts = [1, 64] if quick else [1, 64, 256]
    text, expected = tool_reply(2, 2) if quick else tool_reply(3, 4)      # ~180 and ~300 tokens
    tokenizer = Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    script = tokenizer.encode(text) + list(tokenizer.eos_token_ids[:1])
    folder = Path(tempfile.mkdtemp(prefix="tokworker-bench-tools-"))
    (folder / "reply.txt").write_text(text)
    maps = {}
    for side in ("vllm", "tokworker"):
        (folder / side).write_bytes(bytes(8))
        with open(folder / side, "r+b") as f:
            maps[side] = mmap.mmap(f.fileno(), 8)
    case = "reasoning + tools"
    try:
        vllm = VllmServer(python, script, STEP_S, PARSER_FLAGS, counter=str(folder / "vllm"))
    except RuntimeError as error:
        shutil.rmtree(folder, ignore_errors=True)
        return [{"case": case, "failed": "vllm", "reason": str(error)[-2000:]}]
    server = None
    rows = []
    try:
        server, url, engine = _server("serve", "--direct", "--parsers", "--reply", str(folder / "reply.txt"),
                                      "--counter", str(folder / "tokworker"))
        extra = {"tools": TOOLS, "ignore_eos": False}     # each reply ends at its eos, after its last call
        body = {"model": SERVED_MODEL, "max_tokens": len(script), "messages": [
            {"role": "user", "content": "The weather, please."}], **extra}
        parsed = {side: asyncio.run(_parsed(where, body)) for side, where in (("vllm", vllm.url), ("tokworker", url))}
        for side, reply in parsed.items():
            if not _calls_found(reply, expected):      # measure nothing a server does not really parse
                return [{"case": case, "failed": side, "reason": "the reply's tool calls were not parsed",
                         "expected": expected, "reply": reply}]
        # what else the two streamed: reasoning and content, each side's edges (newlines) left out
        same = {f"same_{part}": parsed["vllm"][part].strip() == parsed["tokworker"][part].strip()
                for part in ("reasoning", "content")}
        sides = {"vllm": (vllm.url, vllm.pid, None, None, maps["vllm"]),
                 "tokworker": (url, server.pid, engine, _children(server.pid), maps["tokworker"])}
        for count in counts:
            runs = {name: [] for name in sides}
            for _ in range(3):
                for name, (where, pid, skip, workers, counter) in sides.items():
                    runs[name].append(asyncio.run(_streams(where, count, len(script), pid, skip, workers,
                                                           extra=extra, counts=counter)))
            vllm_run, ours = (_best_round(found, count) for found in runs.values())
            vllm_us = vllm_run["api_us_per_token"]
            rows.append({
                "case": case, "streams": count, "tokens_per_stream": len(script),
                "vllm_served_api_us_per_token": vllm_us,
                "direct_api_us_per_token": ours["api_us_per_token"],
                "direct_worker_us_per_token": ours["worker_us_per_token"],
                "vllm_served_ratio_direct": _ratio(vllm_us, ours["api_us_per_token"]),
                "vllm_served_ratio_tier": _ratio(vllm_us, ours["api_us_per_token"] + ours["worker_us_per_token"]),
                "vllm_tokens_per_event": vllm_run["tokens_per_event"],
                "tokworker_tokens_per_event": ours["tokens_per_event"],
                "vllm_window_tokens": vllm_run["window_tokens"], "window_tokens": ours["window_tokens"],
                "calls_parsed": True, **same, "load_1min": round(os.getloadavg()[0], 2)})
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        vllm.stop()
        for counter in maps.values():
            counter.close()
        shutil.rmtree(folder, ignore_errors=True)
    return rows


if __name__ == "__main__":      # python -m bench.vllm_served [--quick] VLLM_PYTHON
    flags = sys.argv[1:]
    for row in run(quick="--quick" in flags, python=next((f for f in flags if f != "--quick"), None)):
        print(json.dumps(row))

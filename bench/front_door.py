"""The front door under real SSE clients: API-process CPU per streamed token, HTTP included.

A `tokworker api` process (the replay engine at a fixed step rate, one tokenizer worker, so the API process
keeps the other core) serves S concurrent streamed chat requests, each read to its end by a real aiohttp SSE
client in this process. Reported per S (1, 64, 256, 1,024):
Each server runs each S three times (once with --quick), taking turns, and each keeps its best run.
- `api_us_per_token`: the API process's CPU (every thread but the replay engine's own, read from
  /proc/PID/task) per streamed token, in the window where all S streams are running (from the moment each
  has its first event to the first one's end), so the requests' setup is not in it; `setup_ms`: the API
  process's CPU per request for the rest (render, open, headers, the end);
- `worker_us_per_token`: the tokenizer worker's CPU per token in the same window;
- `direct_api_us_per_token`, `direct_worker_us_per_token`: the same with `--direct-streaming`, where the
  worker writes each stream's events to its client itself and the API process only moves ids;
- `rss_mb`: the API process's resident memory with the S streams open;
- `floor_us_per_token`: a bare uvloop server writing one event per step to every open response (the floor
  under any Python front door: the write per token per stream);
- beside them, `in_process_us_per_token`: the same text work in one process without HTTP (TextStream.push +
  the chat ChunkWriter per token, what a server without a pool pays before its HTTP write), measured in this
  run; and, where `--vllm-python` is given, vLLM's per-token figure from the same run's beside_vllm section
  (its output processor and chat stream processor on stop strings, with its pydantic chunks and their JSON:
  everything but the HTTP write), joined into these rows by bench/__main__.py as `vllm_ratio(_direct)`.
`choices` rows: 21 requests of n = 3 streamed (85 without --quick), the same per-token figures, forwarded and
direct (one worker writes all three choices); `whole` rows: as many whole responses of n = 3, the API
process's and the worker's CPU per request (`api_ms_per_request`), forwarded and direct (the worker writes
the whole HTTP response).
`first_byte` rows: p50/p90 from sending a ~4,800-token chat with a tool to the response's first byte (its
headers, sent once the prompt is rendered and the request is in the engine), for new conversations and for
each one's next turn; `own` leaves out the engine's part (the response's Server-Timing header), and
`prompt_p50_ms` / `open_p50_ms` are its render-and-encode and stream-open parts.

`python -m bench --only front_door [--quick]`; `python -m bench.front_door serve ...` is the server process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from bisect import bisect_right
from pathlib import Path

from bench.pool import TOOLS, new_chats
from bench.stream import _best

REPO = Path(__file__).resolve().parent.parent
TEXT = ("Streaming through the front door: every token becomes a chunk the worker writes as server-sent event "
        "bytes, and the API process forwards them to the client's socket. Naïve café, 日本語 and 🧑‍🚀 too. ") * 20
STEP_S = 0.02
ONE_STREAM_TOKENS = 250           # 5 s of steps: what one stream costs per token is a few steps' wake-ups


def _serve(step_interval: float, direct: bool, workers: int = 1, reply: str | None = TEXT,
           parsers: bool = False, counter: str | None = None, mute: bool = False) -> None:
    """The server process: `tokworker api` on a long scripted reply (`reply`; None: the replay engine's own
    REPLY, encoded once for every request, where a script's text is encoded per request), its port on
    stdout. `parsers`: hermes and qwen3 named (what the default template implies anyway). `counter`: a file
    of 8 bytes where the engine keeps the number of ids it has played (bench/vllm_served.py reads it).
    `mute`: the step loop takes each engine step's outputs and sends nothing (bench/zmq_floor.py's floor of
    a step in this server: its streams never get a token)."""
    import uvloop

    from tokworker.api.run import serve_http
    from tokworker.api.options import ApiOptions
    from tokworker.engines.replay import ReplayEngine

    if mute:
        from tokworker.api.serving import Serving
        Serving._step = lambda serving: serving.engine.take_outputs()
    engine_class = ReplayEngine if counter is None else _counting(ReplayEngine, counter)
    engine = engine_class(None if reply is None else lambda prompt, sampling: reply, step_interval=step_interval,
                          max_model_len=65536)
    options = ApiOptions(served_model_name=["bench"], max_concurrent_requests=8192, direct_streaming=direct)
    pool = {"workers": workers, "max_streams": 16384}
    if parsers:
        pool.update(tool_parser="hermes", reasoning_parser="qwen3")
    uvloop.run(serve_http(pool, options, engine, port=0,
                          ready=lambda port: print(port, engine.thread_id, flush=True)))


def _counting(engine_class, path: str):
    """`engine_class` whose steps add the ids they play to the counter in `path` (in the engine's thread)."""
    import mmap
    import struct

    with open(path, "r+b") as f:
        counts = mmap.mmap(f.fileno(), 8)
    played = [0]

    class Counting(engine_class):
        def step(self, batch):
            outputs = super().step(batch)
            played[0] += sum(len(output.ids) for output in outputs)
            struct.pack_into("<Q", counts, 0, played[0])
            return outputs
    return Counting


def read_counter(counts) -> int:
    """The ids an engine has played so far, from its counter's map (see `_counting`)."""
    import struct
    return struct.unpack_from("<Q", counts, 0)[0]


def _serve_floor(step_interval: float) -> None:
    """The floor under any Python front door on this machine: a bare uvloop server that answers each request
    with one SSE event of a chunk's size per step, written to every open response by one ticking loop,
    as tokworker's step loop writes them (no parsing, no pool, no engine)."""
    import uvloop

    from tokworker.wire.common import LAST_CHUNK, http_chunk

    event = b'data: {"id":"chatcmpl-0123456789abcdef01234567","object":"chat.completion.chunk","created":1,' \
            b'"model":"bench","choices":[{"index":0,"delta":{"content":" words"},"finish_reason":null,' \
            b'"logprobs":null}]}\n\n'
    chunk = http_chunk(event)
    done = http_chunk(b"data: [DONE]\n\n") + LAST_CHUNK
    open_responses: dict = {}

    class Floor(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.data = transport, b""

        def data_received(self, data):
            self.data += data
            head, sep, body = self.data.partition(b"\r\n\r\n")
            length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), b"0"))
            if sep and len(body) >= length:
                self.data = b""
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                     b"Transfer-Encoding: chunked\r\n\r\n")
                open_responses[self.transport] = json.loads(body)["max_tokens"]

    async def tick():
        while True:
            await asyncio.sleep(step_interval)
            for transport, left in list(open_responses.items()):
                if left:
                    transport.write(chunk)
                    open_responses[transport] = left - 1
                else:
                    transport.write(done)
                    del open_responses[transport]

    async def main():
        server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], 0, flush=True)
        await tick()

    uvloop.run(main())


def _cpu(pid: int, skip: int | None = None, named: str | None = None) -> float:
    """CPU seconds of every thread of `pid` but `skip` (the replay engine's; schedstat: nanoseconds on a
    CPU, where /proc's stat counts 10 ms ticks); `named`: only the threads whose name starts so."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        if task == str(skip):
            continue
        try:
            if named is not None:
                with open(f"/proc/{pid}/task/{task}/comm") as f:
                    if not f.read().startswith(named):
                        continue
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            continue
    return total / 1e9


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


async def _streams(url: str, count: int, tokens: int, server: int, engine: int, worker: int | list[int],
                   token_ends: list[int] | None = None, extra: dict | None = None, counts=None, n: int = 1) -> dict:
    """With `token_ends` (the streamed text's length after each token of the reply), what is counted is
    tokens, read from each event's text, not events: a server that falls behind may merge tokens. With
    `counts` (an engine's counter map, `read_counter`), the ids the engine played: for replies whose parsers
    turn tokens into text no table maps back (reasoning, tool calls). `extra`: more fields of each request's
    body (`tools`, `max_tokens`, `ignore_eos`). `worker`: a worker's pid, or several (their CPU summed). `n`:
    the choices of each request (each choice's event is one token)."""
    import aiohttp

    started = [asyncio.Event() for _ in range(count)]
    events = [0] * count            # events, or tokens with token_ends
    chars, sent = [0] * count, [0] * count
    marks: dict = {}
    all_running = asyncio.Event()
    loads = json.loads
    workers = [worker] if isinstance(worker, int) else worker or []

    def work() -> float:
        return sum(_cpu(pid) for pid in workers)

    def played() -> int:
        return sum(events) if counts is None else read_counter(counts)

    async def one(i: int, session) -> None:
        body = {"model": "bench", "stream": True, "max_tokens": tokens, "ignore_eos": True, "n": n,
                "messages": [{"role": "user", "content": f"Stream {i}, please."}], **(extra or {})}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            if response.status != 200:
                raise RuntimeError(f"stream {i}: HTTP {response.status}: {await response.text()}")
            async for line in response.content:
                if line.startswith(b"data: {"):
                    sent[i] += 1
                    if token_ends is None:
                        events[i] += 1
                    else:
                        for choice in loads(line[6:])["choices"]:
                            chars[i] += len(choice["delta"].get("content") or "")
                        events[i] = bisect_right(token_ends, chars[i])
                    if not started[i].is_set():
                        started[i].set()
                        if all(e.is_set() for e in started):
                            marks["begin"] = (_cpu(server, engine), work(), played(), _rss_mb(server),
                                              time.perf_counter())
                            all_running.set()
                elif line.startswith(b"data: [DONE]") and "end" not in marks and all_running.is_set():
                    marks["end"] = (_cpu(server, engine), work(), played(), time.perf_counter())

    cpu0, played0 = _cpu(server, engine), played()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one(i, session) for i in range(count)))
    cpu_all = _cpu(server, engine) - cpu0
    (api0, work0, ev0, rss, t0), (api1, work1, ev1, t1) = marks["begin"], marks["end"]
    window = max(ev1 - ev0, 1)
    row = {"streams": count, "tokens": sum(events), "window_tokens": window, "window_s": round(t1 - t0, 3),
           "api_us_per_token": round((api1 - api0) / window * 1e6, 2),
           "worker_us_per_token": round((work1 - work0) / window * 1e6, 2),
           "setup_ms": round((cpu_all - (api1 - api0)) / count * 1e3, 3), "rss_mb": round(rss, 1)}
    if token_ends is not None or counts is not None:
        row["tokens_per_event"] = round((played() - played0 if counts is not None else sum(events))
                                        / max(sum(sent), 1), 3)
    return row


async def _wholes(url: str, count: int, tokens: int, server: int, engine: int, worker: int, n: int) -> dict:
    """`count` whole responses of `n` choices at once: the API process's and the worker's CPU per request,
    everything included (parse, prompt, open, ids per step, the body and its write)."""
    import aiohttp

    async def one(i: int, session) -> None:
        body = {"model": "bench", "max_tokens": tokens, "ignore_eos": True, "n": n,
                "messages": [{"role": "user", "content": f"Whole {i}, please."}]}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            if response.status != 200:
                raise RuntimeError(f"whole {i}: HTTP {response.status}: {await response.text()}")
            assert len((await response.json())["choices"]) == n

    api0, work0 = _cpu(server, engine), _cpu(worker)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one(i, session) for i in range(count)))
    return {"requests": count, "n": n, "api_ms_per_request": round((_cpu(server, engine) - api0) / count * 1e3, 3),
            "worker_ms_per_request": round((_cpu(worker) - work0) / count * 1e3, 3)}


async def _first_bytes(url: str, count: int) -> list[dict]:
    """Time to the first byte of a streamed ~4,800-token chat with a tool: a new conversation (every word
    new to the workers' caches) and the same conversation's next turn (what follow-up traffic sends). The
    response's Server-Timing header splits tokworker's prompt phase from the engine's add; `own` is the
    first byte's time without the engine's part."""
    import aiohttp

    chats = [chat * 3 for chat in new_chats(count, seed=11)]
    rows = []
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/tokenize", json={"messages": chats[0], "tools": TOOLS}) as response:
            prompt = (await response.json())["count"]
        for case, turns in (("new chat", chats),
                            ("next turn", [chat + [{"role": "assistant", "content": "Noted."},
                                                   {"role": "user", "content": "And then?"}] for chat in chats])):
            totals, owns, prompts, opens = [], [], [], []
            for chat in turns:
                body = {"model": "bench", "stream": True, "max_tokens": 1, "tools": TOOLS, "messages": chat}
                began = time.perf_counter()
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    total = time.perf_counter() - began
                    timing = dict(part.split(";dur=") for part in response.headers["Server-Timing"].split(", "))
                    async for _ in response.content:
                        pass
                totals.append(total)
                owns.append(total - float(timing["engine"]) / 1e3)
                prompts.append(float(timing["prompt"]))
                opens.append(float(timing["open"]))
            for values in (totals, owns, prompts, opens):
                values.sort()
            rows.append({"case": "first_byte", "chat": case, "prompt_tokens": prompt, "requests": count,
                         "p50_ms": round(totals[len(totals) // 2] * 1e3, 2),
                         "own_p50_ms": round(owns[len(owns) // 2] * 1e3, 2),
                         "own_p90_ms": round(owns[int(len(owns) * 0.9)] * 1e3, 2),
                         "prompt_p50_ms": prompts[len(prompts) // 2], "open_p50_ms": opens[len(opens) // 2]})
    return rows


def _in_process_us_per_token(tokens: int) -> float:
    """TextStream.push + ChunkWriter.sse per token in this process, on the same reply, best of 3."""
    from tokworker import Tokenizer, TextStream
    from tokworker.protocol.deltas import ChunkFormat, StreamParams
    from tokworker.wire import writer_for
    from tokworker.worker.options import DEFAULT_MODEL_DIR

    tokenizer = Tokenizer.from_dir(DEFAULT_MODEL_DIR)
    ids = tokenizer.encode(TEXT)[:tokens]
    params = StreamParams(max_tokens=tokens, ignore_eos=True)

    def twenty_streams():
        for _ in range(20):
            stream = TextStream(tokenizer, params)
            writer = writer_for(ChunkFormat(id="chatcmpl-1", model="bench", created=1), params)
            push, sse = stream.push, writer.sse
            for token in ids:
                sse(push([token]))
    return round(_best(twenty_streams, 3) / (20 * len(ids)) * 1e6, 2)


def _server(mode: str, *flags: str) -> tuple[subprocess.Popen, str, int]:
    server = subprocess.Popen([sys.executable, "-m", "bench.front_door", mode, str(STEP_S), *flags],
                              stdout=subprocess.PIPE, cwd=REPO, text=True)
    port, engine = map(int, server.stdout.readline().split())
    return server, f"http://127.0.0.1:{port}", engine


def run(quick: bool = False, model_dirs=()) -> list[dict]:
    counts = [1, 64] if quick else [1, 64, 256, 1024]
    tokens = 40 if quick else 150          # per stream; 1,024 streams get more (their start takes seconds)
    rows = []
    server, url, engine = _server("serve")
    direct, direct_url, direct_engine = _server("serve", "--direct")
    floor, floor_url, _ = _server("serve-floor")
    try:
        worker, direct_worker = _children(server.pid)[0], _children(direct.pid)[0]
        for count in counts:
            # the three servers take turns, three times, and each keeps its best round: a shared
            # machine's noise only ever adds CPU
            runs = {"forwarded": [], "direct": [], "floor": []}
            length = tokens * max(1, count // 256)
            if count == 1:           # one stream's 40 steps were under a second: a shared machine's noise
                length = max(length, ONE_STREAM_TOKENS)
            for _ in range(1 if quick else 3):
                runs["forwarded"].append(asyncio.run(_streams(url, count, length, server.pid, engine, worker)))
                runs["direct"].append(asyncio.run(_streams(direct_url, count, length, direct.pid, direct_engine,
                                                           direct_worker)))
                runs["floor"].append(asyncio.run(_streams(floor_url, count, length, floor.pid, None, None)))
            best = {name: min([r for r in found if r["window_tokens"] >= 10 * count] or found,
                              key=lambda r: r["api_us_per_token"]) for name, found in runs.items()}
            row = {"case": "streams", **best["forwarded"]}
            row.update(floor_us_per_token=best["floor"]["api_us_per_token"],
                       direct_api_us_per_token=best["direct"]["api_us_per_token"],
                       direct_worker_us_per_token=best["direct"]["worker_us_per_token"])
            rows.append(row)
        # several choices (n = 3, one worker writes them all when direct), streamed and whole
        count = 21 if quick else 85
        for case, measure in (("choices", _streams), ("whole", _wholes)):
            runs = {"forwarded": [], "direct": []}
            key = "api_us_per_token" if case == "choices" else "api_ms_per_request"
            for _ in range(1 if quick else 3):
                runs["forwarded"].append(asyncio.run(measure(url, count, tokens, server.pid, engine, worker, n=3)))
                runs["direct"].append(asyncio.run(measure(direct_url, count, tokens, direct.pid, direct_engine,
                                                          direct_worker, n=3)))
            best = {name: min(found, key=lambda r: r[key]) for name, found in runs.items()}
            row = {"case": case, "n": 3, **best["forwarded"]}
            row.update({f"direct_{name}": value for name, value in best["direct"].items()
                        if name.endswith(("_per_token", "_per_request"))})
            rows.append(row)
        rows += asyncio.run(_first_bytes(url, 8 if quick else 40))
    finally:
        for process in (server, direct, floor):
            process.terminate()
            process.wait(30)
    in_process = _in_process_us_per_token(tokens)
    for row in rows:
        if row["case"] == "streams":
            row["in_process_us_per_token"] = in_process
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        # serve STEP_S [--direct] [--workers N] [--reply FILE | --reply none] [--parsers] [--counter FILE]
        # [--mute-steps]
        given = dict(zip(sys.argv[3:], sys.argv[4:]))      # each flag with the word after it
        reply = given.get("--reply")
        _serve(float(sys.argv[2]), "--direct" in sys.argv, int(given.get("--workers", 1)),
               TEXT if reply is None else None if reply == "none" else Path(reply).read_text(),
               "--parsers" in sys.argv, given.get("--counter"), "--mute-steps" in sys.argv)
    elif sys.argv[1:2] == ["serve-floor"]:
        _serve_floor(float(sys.argv[2]))
    else:
        for row in run(quick="--quick" in sys.argv):
            print(json.dumps(row))

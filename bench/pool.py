"""The pool: what moving text work out of the API process costs per step, and what it buys the engine loop.

1. Step round trip. S open streams, one id each per step, `await pool.step(...)` in a loop: p50/p99 of the
   round trip and tokens/s, with 1..N workers.
   "step awaited in turn": the API thread's CPU per stream-step, each step awaited before the next (what
   an engine loop that waits for its text pays), beside TextStream.push of the same ids in-process, and
   as a multiple of a bare ZeroMQ round trip read the same way (bench/zmq_floor.py: the floor under it).
   "renders sent per step": the same 64-stream round trip while every step also sends 10 chats to render
   (a burst flooding the pool), beside 0: steps have their own lane on the link and in the worker.
2. A simulated engine loop in the API process. Each step does a fixed amount of pure-Python work (the
   scheduler/sampler stand-in) and emits one id for each of N concurrent streams. Their text is handled
   either in-process (TextStream.push in the loop, as a server without a pool does) or through the pool
   (one message per worker per step, pipelined: the loop does not wait for the deltas; streams opened with
   `engine_ids`, the engine's record of their ids, so the pool keeps no id log of its own). Reported: engine
   step time p50/p99, and the delay from a token's emission to its delta being available to the API.
   A third case adds one new ~1,500-token chat per step, rendered and encoded in the loop or by the pool.
   The "SSE chunks" cases compare what an OpenAI-compatible server really does per token: in-process,
   TextStream.push then ChunkWriter.sse (the chunk's server-sent event bytes); through the pool, streams
   opened with a ChunkFormat, so the loop receives those bytes ready for the HTTP response.
   `loop_cpu_ms_per_step` is the CPU the loop's own thread spent per step (what holds the GIL; robust on
   a busy machine, unlike wall times), `text_cpu_ms_per_step` the part of it not spent in the engine's own
   work (the text path alone: the difference the pool makes, without the fixed work diluting it).
   The pool has one worker per core but the loop's, two at most (on 2 cores a second worker competes with
   the loop for its core and costs it a second message per step: measured, the loop's CPU is lower with one).
   Under every pipelined step is its message: "one send between ... ms of engine work" is the loop
   thread's CPU for one ZeroMQ send after the engine's work, and for a bare pipe write (bench/zmq_floor.py).
   `cpu_ratio` = in-process / pool of loop CPU, `text_cpu_ratio` of text CPU, `step_ratio` the same for
   step time p50 (above 1: the pool gives the engine loop time back). Each case runs 5 times, in-process
   and pool interleaved (once with --quick); a row is the run with the median loop CPU.
3. Constrained decoding: S requests forced into a tool call, one token per step: the `guide` round trip
   (every request's next state and token bitmask in one message) against the same automaton walked in
   the API process. On Qwen3's 151,669-token vocabulary when installed (the bundled one with --quick).

`python -m bench --only pool [--quick]`; `run(quick)` returns the rows.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

from bench.zmq_floor import round_trip_cpu_us, send_cpu_us
from tokworker.protocol.deltas import ChunkFormat, StreamParams

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
TEXT = ("The pool moves tokenization, template rendering and detokenization out of the API process. "
        "Naïve café, 日本語のテキスト, emoji 🧑‍🚀🚀 and code like `print(x)` all stream through it. ") * 40
PARAMS = StreamParams(stop=["</answer>", "STOP HERE"])
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
PARSED_TEXT = ("<think>\nThe user asks about Paris; the tool knows the weather.\n</think>\n\nLet me check. "
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>") * 20


def new_chats(count: int, seed: int = 0) -> list[list[dict]]:
    """Distinct conversations of about 1,500 tokens, with words no cache has seen (as real traffic is)."""
    rng = random.Random(seed)
    words = ["alpha", "β", "日本", "🚀", "naïve", "café", "code", "stream", "token", "pool"]

    def text(n: int) -> str:
        return " ".join(f"{rng.choice(words)}{rng.randrange(10**6)}" for _ in range(n))
    return [[{"role": "system", "content": "You are a careful assistant."},
             {"role": "user", "content": text(70)}, {"role": "assistant", "content": text(70)},
             {"role": "user", "content": text(30)}] for _ in range(count)]


KINDS = {"stop strings": (TEXT, PARAMS),
         "reasoning + tools": (PARSED_TEXT, StreamParams(stop=["</answer>"], reasoning_parser="qwen3",
                                                         tool_parser="hermes", tools=TOOLS))}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _busy(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


async def _round_trips(workers: int, streams: int, steps: int, ids: list[int]) -> dict:
    """`await pool.step` in a loop: the latency of one step through the pool and the tokens it moves."""
    from tokworker.frontend import TokenizerPool

    async with await TokenizerPool.spawn(MODEL, workers=workers) as pool:
        names = [f"s{i}" for i in range(streams)]
        for name in names:
            await pool.open_stream(name, PARAMS, buffer=False)
        times = []
        started = time.perf_counter()
        for k in range(steps):
            batch = {name: [ids[(k + i) % len(ids)]] for i, name in enumerate(names)}
            t0 = time.perf_counter()
            await pool.step(batch)
            times.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
    return {"case": "step round trip", "workers": workers, "streams": streams, "steps": steps,
            "p50_ms": _ms(_percentile(times, 0.5)), "p99_ms": _ms(_percentile(times, 0.99)),
            "tokens_per_s": round(streams * steps / elapsed)}


async def _awaited_steps(streams: int, steps: int, ids: list[int], tokenizer, workers: int) -> dict:
    """Each step awaited before the next (an engine loop that needs the text before it goes on): the API
    thread's CPU per stream-step through the pool, beside TextStream.push of the same ids in-process."""
    from tokworker.frontend import TokenizerPool
    from tokworker.stream.state import TextStream

    names = [f"s{i}" for i in range(streams)]
    batches = [{name: [ids[(k + i) % len(ids)]] for i, name in enumerate(names)} for k in range(steps)]
    local = {name: TextStream(tokenizer, PARAMS) for name in names}
    cpu_started = time.thread_time()
    for batch in batches:
        for name, new in batch.items():
            local[name].push(new)
    local_cpu = time.thread_time() - cpu_started
    warm, sent = 20, [0]                                           # the engine's record of stepped ids:

    def record(i: int):                                            # 5 `warm` times, then the batches
        return lambda: [5] * min(sent[0], warm) + [ids[(k + i) % len(ids)] for k in range(max(0, sent[0] - warm))]
    async with await TokenizerPool.spawn(MODEL, workers=workers) as pool:
        for i, name in enumerate(names):
            await pool.open_stream(name, PARAMS, buffer=False, engine_ids=record(i))
        for batch in batches[:warm]:                               # warm both ends
            sent[0] += 1
            await pool.step({name: [5] for name in batch})
        cpu_started = time.thread_time()
        for batch in batches:
            sent[0] += 1
            await pool.step(batch)
        pool_cpu = time.thread_time() - cpu_started
    per = steps * streams
    return {"case": "step awaited in turn: API-thread CPU", "workers": workers, "streams": streams, "steps": steps,
            "pool_us_per_step": round(pool_cpu / steps * 1e6, 2),
            "pool_us_per_stream_step": round(pool_cpu / per * 1e6, 3),
            "in_process_us_per_stream_step": round(local_cpu / per * 1e6, 3),
            "pool_vs_in_process": round(pool_cpu / max(local_cpu, 1e-9), 2)}


async def _steps_under_renders(workers: int, streams: int, steps: int, ids: list[int], burst: int) -> dict:
    """Step round trips of `streams` streams, each step awaited, while every step also sends `burst` new
    ~1,500-token chats to render (not awaited: a flood of requests arriving at the API): what renders cost
    the engine's steps on the same pool. Renders the pool refused (Overloaded) are counted, not retried."""
    from tokworker.frontend import Overloaded, TokenizerPool

    chats = new_chats(64, seed=1)
    refused = 0
    async with await TokenizerPool.spawn(MODEL, workers=workers) as pool:
        names = [f"s{i}" for i in range(streams)]
        for name in names:
            await pool.open_stream(name, PARAMS, buffer=False)
        renders: list[asyncio.Future] = []
        times = []
        for k in range(steps):
            for j in range(burst):
                try:
                    renders.append(asyncio.ensure_future(pool.render(chats[(k * burst + j) % len(chats)])))
                except Overloaded:
                    refused += 1
            await asyncio.sleep(0)
            batch = {name: [ids[(k + i) % len(ids)]] for i, name in enumerate(names)}
            t0 = time.perf_counter()
            await pool.step(batch)
            times.append(time.perf_counter() - t0)
        results = await asyncio.gather(*renders, return_exceptions=True)
    refused += sum(isinstance(r, Overloaded) for r in results)
    return {"case": f"step round trip, {burst} renders sent per step", "workers": workers, "streams": streams,
            "steps": steps, "p50_ms": _ms(_percentile(times, 0.5)), "p99_ms": _ms(_percentile(times, 0.99)),
            "p90_ms": _ms(_percentile(times, 0.9)), "max_ms": _ms(max(times)), "renders_sent": steps * burst, "renders_refused": refused,
            "steps_failed": 0}


async def _engine_loop(mode: str, streams: int, steps: int, work: int, ids: list[int], params: StreamParams,
                       tokenizer, workers: int, arrivals: bool, sse: bool = False) -> dict:
    """One simulated engine run, text "in-process" or through the "pool". With `arrivals`, a new chat is
    rendered and encoded every step too (in the loop, or sent to the pool and awaited elsewhere). With
    `sse`, every update becomes OpenAI chunk events (in the loop, or written by the workers)."""
    from tokworker.frontend import TokenizerPool
    from tokworker.wire.chat import ChunkWriter
    from tokworker.stream.state import TextStream

    names = [f"s{i}" for i in range(streams)]
    formats = {name: ChunkFormat(id=f"chatcmpl-{name}", model="bench", created=1700000000) for name in names}
    step_times, delays = [], []
    pool = None
    sent = [0]                                                     # steps sent: the engine's record of

    def record(i: int):                                            # stream i's ids is ids[i:i + sent], wrapped
        return lambda: [ids[(k + i) % len(ids)] for k in range(sent[0])]
    if mode == "pool":
        pool = await TokenizerPool.spawn(MODEL, workers=workers)
        for i, name in enumerate(names):
            await pool.open_stream(name, params, buffer=False, chunks=formats[name] if sse else None,
                                   engine_ids=record(i))
    else:
        local = {name: TextStream(tokenizer, params) for name in names}
        writers = {name: ChunkWriter.for_format(formats[name]) for name in names} if sse else None
    in_flight: list[asyncio.Future] = []
    prompts: list[asyncio.Future] = []
    chats = new_chats(steps) if arrivals else []

    def arrived(emitted: float):
        def record(future: asyncio.Future) -> None:
            if not future.cancelled() and future.exception() is None:
                delays.append(time.perf_counter() - emitted)
        return record

    try:
        started = time.perf_counter()
        cpu_started = time.thread_time()
        work_cpu = 0.0
        for k in range(steps):
            t0 = time.perf_counter()
            w0 = time.thread_time()
            _busy(work)                                            # the engine's own Python work
            work_cpu += time.thread_time() - w0
            batch = {name: [ids[(k + i) % len(ids)]] for i, name in enumerate(names)}
            emitted = time.perf_counter()
            if pool is None:
                if writers is None:
                    for name, new in batch.items():
                        local[name].push(new)
                else:
                    for name, new in batch.items():
                        writers[name].sse(local[name].push(new))
                delays.append(time.perf_counter() - emitted)
                if arrivals:
                    tokenizer.apply_chat_template(chats[k], add_generation_prompt=True)
            else:
                sent[0] += 1
                future = pool.submit_step(batch)
                future.add_done_callback(arrived(emitted))
                in_flight.append(future)
                while len(in_flight) > 4:                          # bounded pipelining
                    await in_flight.pop(0)
                in_flight = [f for f in in_flight if not f.done()]
                if arrivals:
                    prompts.append(asyncio.ensure_future(pool.render(chats[k])))
                    while len(prompts) > 8:
                        await prompts.pop(0)
            await asyncio.sleep(0)                                 # the API's other tasks run here
            step_times.append(time.perf_counter() - t0)
        for future in in_flight + prompts:
            await future
        elapsed = time.perf_counter() - started
        cpu = time.thread_time() - cpu_started
    finally:
        if pool is not None:
            await pool.close()
    return {"loop_cpu_ms_per_step": _ms(cpu / steps), "text_cpu_ms_per_step": _ms((cpu - work_cpu) / steps),
            "step_p50_ms": _ms(_percentile(step_times, 0.5)),
            "step_p99_ms": _ms(_percentile(step_times, 0.99)), "delay_p50_ms": _ms(_percentile(delays, 0.5)),
            "delay_p99_ms": _ms(_percentile(delays, 0.99)), "tokens_per_s": round(streams * steps / elapsed)}


CALL = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris, 日本 🚀 and a longer name to '
        'spell out"}}\n</tool_call>')


async def _guide_steps(model_dir, sequences: int, tokenizer, trie) -> list[dict]:
    """Constrained decoding of a forced tool call by `sequences` concurrent requests, one token per step:
    the pool's guide round trip (one message per step for all of them) against the same work done in the
    API process (TokenAutomaton.allowed_mask + advance per sequence; its masks cached as the worker's are)."""
    from tokworker.frontend import TokenizerPool
    from tokworker.constrain import TokenAutomaton

    ids = tokenizer.encode(CALL) + list(tokenizer.eos_token_ids)
    automaton = TokenAutomaton(_tool_pattern(), trie, eos_ids=tokenizer.eos_token_ids)
    local_times = []
    for _ in range(2):                                         # the second pass has every state compiled
        states = [automaton.initial_state] * sequences
        local_times = []
        for token in ids:
            t0 = time.perf_counter()
            for i in range(sequences):
                automaton.allowed_mask(states[i])
                states[i] = automaton.advance(states[i], token)
            local_times.append(time.perf_counter() - t0)
    async with await TokenizerPool.spawn(model_dir, workers=1, startup_timeout=120) as pool:
        constraint = await pool.compile(tools=TOOLS, tool_name="get_weather")
        for _ in range(2):
            states = {f"r{i}": constraint.initial_state for i in range(sequences)}
            sampled: list[int] = []
            times = []
            for token in ids:
                t0 = time.perf_counter()
                results = await pool.guide({name: (constraint, state, sampled) for name, state in states.items()})
                times.append(time.perf_counter() - t0)
                states = {name: result.state for name, result in results.items()}
                sampled = [token]
    return [{"case": "guide (constrained decoding) step", "vocab_size": tokenizer.vocab_size, "sequences": sequences,
             "steps": len(ids), "mask_bytes": (tokenizer.vocab_size + 31) // 32 * 4,
             "pool_p50_ms": _ms(_percentile(times, 0.5)), "pool_p99_ms": _ms(_percentile(times, 0.99)),
             "in_process_p50_ms": _ms(_percentile(local_times, 0.5)),
             "in_process_p99_ms": _ms(_percentile(local_times, 0.99))}]


def _tool_pattern() -> str:
    from tokworker.constrain.tool_choice import tool_call_pattern
    return tool_call_pattern(TOOLS, "get_weather", format="hermes")


def _guide_model(quick: bool):
    """Qwen3's real vocabulary when installed (what a large vocabulary costs), else (and with --quick) the
    bundled one."""
    if quick:
        return MODEL
    try:
        from bench.realdata import VOCABULARIES
        path = VOCABULARIES["qwen3_dir"]()
    except ImportError:
        path = None
    return path or MODEL


def _median_run(runs: list[dict]) -> dict:
    """The run with the median loop CPU (whole, so its columns stay one run's): single runs of the same
    case scatter by up to 2x on a machine whose cores other processes share."""
    return sorted(runs, key=lambda run: run["loop_cpu_ms_per_step"])[len(runs) // 2]


def _calibrate(target_s: float) -> tuple[int, float]:
    """Iterations of _busy that take about target_s of CPU (the fixed per-step engine work), and the CPU
    they really took (thread time: not inflated by other processes on a busy machine)."""
    iterations = 20_000
    t0 = time.thread_time()
    _busy(iterations)
    iterations = max(1, int(iterations * target_s / max(time.thread_time() - t0, 1e-6)))
    t0 = time.thread_time()
    for _ in range(5):
        _busy(iterations)
    return iterations, (time.thread_time() - t0) / 5


async def _run(quick: bool) -> list[dict]:
    from tokworker import Tokenizer

    tokenizer = Tokenizer.from_dir(MODEL)
    ids = tokenizer.encode(TEXT)
    cpus = os.cpu_count() or 1
    print(f"pool bench: os.cpu_count() = {cpus}", flush=True)
    rows = []
    steps = 100 if quick else 300
    for workers in range(1, max(2, cpus) + 1):
        rows.append(await _round_trips(workers, 64, steps, ids))
    floor = await round_trip_cpu_us()
    rows.append({"case": "bare ZeroMQ round trip (the floor)", "api_us_per_round_trip": floor})
    for streams in (1, 64, 256):
        row = await _awaited_steps(streams, 2000 if streams == 1 else steps, ids, tokenizer, 1)
        row["pool_vs_floor"] = round(row["pool_us_per_step"] / floor, 2)
        rows.append(row)
    for burst in (0, 10):
        rows.append(await _steps_under_renders(max(1, min(2, cpus)), 64, steps // 2, ids, burst))
    guide_dir = _guide_model(quick)
    guide_tokenizer = Tokenizer.from_dir(guide_dir)
    from tokworker.constrain import VocabTrie
    trie = VocabTrie(guide_tokenizer.vocab_bytes())
    for sequences in ((1, 32) if quick else (1, 32, 128)):
        rows.extend(await _guide_steps(guide_dir, sequences, guide_tokenizer, trie))
    work, work_s = _calibrate(0.002)
    sends = send_cpu_us(work_s)
    rows.append({"case": f"one send between {_ms(work_s)} ms of engine work (the engine loop's floor)",
                 "zmq_send_us": sends["zmq"], "pipe_write_us": sends["pipe"]})
    workers = min(2, max(1, cpus - 1))              # a core stays the loop's: on 2, a second worker would take it
    repeats = 1 if quick else 5
    kinds = [(kind, text, params, False, False) for kind, (text, params) in KINDS.items()]
    kinds.append(("stop strings + one new chat per step", TEXT, PARAMS, True, False))
    kinds.extend((f"{kind}, SSE chunks", text, params, False, True) for kind, (text, params) in KINDS.items())
    for kind, text, params, arrivals, sse in kinds:
        kind_ids = tokenizer.encode(text)
        for streams in ((64, 256) if quick else (64, 256, 512)):
            base = {"case": f"engine loop, {kind}", "streams": streams, "cpus": cpus,
                    "engine_work_cpu_ms": _ms(work_s)}
            runs: dict[str, list[dict]] = {"in-process": [], "pool": []}
            for _ in range(repeats):                           # interleaved, so a busy spell hits both modes
                for mode in runs:
                    runs[mode].append(await _engine_loop(mode, streams, steps, work, kind_ids, params, tokenizer,
                                                         1 if mode == "in-process" else workers, arrivals, sse))
            local, pooled = _median_run(runs["in-process"]), _median_run(runs["pool"])
            base["runs"] = repeats
            rows.append({**base, "text": "in-process", **local})
            rows.append({**base, "text": f"pool ({workers} workers)", **pooled,
                         "cpu_ratio": round(local["loop_cpu_ms_per_step"] / max(pooled["loop_cpu_ms_per_step"], 1e-6),
                                            2),
                         "text_cpu_ratio": round(local["text_cpu_ms_per_step"] /
                                                 max(pooled["text_cpu_ms_per_step"], 1e-6), 2),
                         "step_ratio": round(local["step_p50_ms"] / max(pooled["step_p50_ms"], 1e-6), 2)})
    return rows


def run(quick: bool = False, model_dirs=()) -> list[dict]:
    try:
        import uvloop
        return uvloop.run(_run(quick))
    except ImportError:
        return asyncio.run(_run(quick))


if __name__ == "__main__":
    import json
    import sys
    for row in run(quick="--quick" in sys.argv):
        print(json.dumps(row, ensure_ascii=False))

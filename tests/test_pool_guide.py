"""Constrained decoding through a real pool on Qwen3's real 151,669-token vocabulary: every per-step mask the
workers send equals the in-process TokenAutomaton's allowed set, state for state, along a forced
get_weather call; a worker killed mid-call, or one that evicted the automaton, is compiled again
transparently with the same state numbers; big batches are split under the message size limit; a reply
carries each distinct mask once. And the bounds as `tokworker serve` flags: a daemon started with small
ones evicts, as a raw client sees it on the wire.
Covers tokworker.frontend.constraints."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import uvloop
import zmq

from tokworker.frontend import InvalidRequest, TokenizerPool
from tokworker.protocol.messages import (PROTOCOL_VERSION, Compile, CompileReply, ErrorCode, ErrorReply, Guide, GuideQuery,
                               GuideReply, Hello, HelloReply, decode_reply, encode_message, frame, unpack_id)
from tests.realdata import vocabulary
from tests.test_automaton import WEATHER_TOOL
from tokworker.constrain import TokenAutomaton, VocabTrie
from tokworker.constrain.json_schema import json_schema_to_regex
from tokworker.constrain.tool_choice import tool_call_pattern
from tokworker.tokenizer import Tokenizer

CALL = ('<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris, 日本 🚀", "unit": "celsius", '
        '"days": 3}}\n</tool_call>')
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(scope="module")
def qwen3():
    """(event loop, pool, tokenizer, trie): one Qwen3 worker that keeps at most two constraints and sends
    at most 1 MiB per message (so a guide of more than ~27 masks of 18,960 bytes must be split). The worker
    starts loading first, so that it and this process build their tables at the same time."""
    path = vocabulary("qwen3_dir")
    loop = uvloop.new_event_loop()
    spawning = loop.create_task(TokenizerPool.spawn(path, workers=1, max_constraints=2, max_message_bytes=1 << 20,
                                                    startup_timeout=120))
    loop.run_until_complete(asyncio.sleep(0.01))            # the worker process is started
    tokenizer = Tokenizer.from_dir(path)
    trie = VocabTrie(tokenizer.vocab_bytes())
    pool = loop.run_until_complete(spawning)
    yield loop, pool, tokenizer, trie
    loop.run_until_complete(pool.close())
    loop.close()


def allowed_ids(mask: bytes) -> list[int]:
    """The token ids whose bit is set (bit t % 32 of little-endian 32-bit word t // 32)."""
    return [i * 8 + bit for i, byte in enumerate(mask) if byte for bit in range(8) if byte >> bit & 1]


def test_masks_equal_the_in_process_automaton_along_a_forced_call_through_a_worker_kill(qwen3):
    loop, pool, tokenizer, trie = qwen3
    automaton = TokenAutomaton(tool_call_pattern([WEATHER_TOOL], "get_weather", format="hermes"), trie,
                               eos_ids=tokenizer.eos_token_ids)
    ids = tokenizer.encode(CALL) + tokenizer.eos_token_ids

    async def main():
        constraint = await pool.compile(tools=[WEATHER_TOOL], tool_name="get_weather")
        assert constraint.pattern == automaton.dfa.pattern and constraint.initial_state == automaton.initial_state
        holder = pool.links.index(constraint.link)
        state, sampled, expected = constraint.initial_state, [], automaton.initial_state
        for step, token in enumerate(ids):
            if step == len(ids) // 2:                      # kill the worker that holds the automaton
                os.kill(pool.launcher.pids[holder], signal.SIGKILL)
            result = (await pool.guide({"call": (constraint, state, sampled)}))["call"]
            assert len(result.mask) == (151_669 + 31) // 32 * 4
            assert result.state == expected
            assert allowed_ids(result.mask) == list(automaton.allowed(expected)), step
            assert result.accepting == automaton.is_accepting(expected)
            state, sampled, expected = result.state, [token], automaton.advance(expected, token)
        assert result.accepting and tokenizer.eos_token_ids[0] in allowed_ids(result.mask)
        assert pool.links[holder].recoveries >= 1

    loop.run_until_complete(main())


def test_a_batch_of_sequences_on_evicted_constraints_is_split_and_exact(qwen3):
    loop, pool, tokenizer, trie = qwen3
    cases = [({"tools": [WEATHER_TOOL], "tool_name": "get_weather"}, tool_call_pattern([WEATHER_TOOL], "get_weather"),
              CALL),
             ({"json_schema": SCHEMA}, json_schema_to_regex(SCHEMA), '{"n": -120345}'),
             ({"pattern": "(yes|no|maybe), 日本"}, "(yes|no|maybe), 日本", "maybe, 日本")]
    automata = [TokenAutomaton(pattern, trie, eos_ids=tokenizer.eos_token_ids) for _, pattern, _ in cases]

    async def main():
        constraints = [await pool.compile(**request) for request, _, _ in cases]   # 3 > max_constraints=2
        assert [c.pattern for c in constraints] == [pattern for _, pattern, _ in cases]
        queries, expected = {}, {}
        for n in range(60):
            which = n % 3
            ids = tokenizer.encode(cases[which][2])
            prefix = ids[:n % (len(ids) + 1)]
            state = automata[which].initial_state
            for token in prefix:
                state = automata[which].advance(state, token)
            queries[f"seq-{n}"] = (constraints[which], constraints[which].initial_state, prefix)
            expected[f"seq-{n}"] = (which, state)
        queries["bad-token"] = (constraints[2], constraints[2].initial_state, tokenizer.encode("never"))
        queries["bad-state"] = (constraints[1], 10**6, [])
        for _ in range(2):        # 62 masks of 18,960 bytes: over 1 MiB unless split; the second time round the
            results = await pool.guide(queries)       # worker has evicted another one of the three
            for name, (which, state) in expected.items():
                assert results[name].state == state, name
                assert allowed_ids(results[name].mask) == list(automata[which].allowed(state)), name
            assert isinstance(results["bad-token"], InvalidRequest) and isinstance(results["bad-state"], InvalidRequest)

    loop.run_until_complete(main())


def test_sequences_in_one_state_share_one_mask_on_the_wire_and_in_the_result(qwen3):
    loop, pool, tokenizer, trie = qwen3
    automaton = TokenAutomaton(tool_call_pattern([WEATHER_TOOL], "get_weather", format="hermes"), trie,
                               eos_ids=tokenizer.eos_token_ids)
    first = tokenizer.encode(CALL)[:1]

    async def main():
        constraint = await pool.compile(tools=[WEATHER_TOOL], tool_name="get_weather")
        link = constraint.link
        queries = {f"start-{i}": GuideQuery(constraint_id=constraint.id, state=constraint.initial_state)
                   for i in range(20)}
        queries.update({f"next-{i}": GuideQuery(constraint_id=constraint.id, state=constraint.initial_state,
                                                ids=first) for i in range(5)})
        reply = await link.request(encode_message(Guide(queries=queries)))
        assert isinstance(reply, GuideReply) and len(reply.masks) == 2           # 25 sequences, two masks
        assert {reply.results[f"start-{i}"].mask for i in range(20)} == {reply.results["start-0"].mask}
        results = await pool.guide({name: (constraint, query.state, query.ids) for name, query in queries.items()})
        start = results["start-0"].mask
        assert allowed_ids(start) == list(automaton.allowed(automaton.initial_state))
        assert all(results[f"start-{i}"].mask is start for i in range(20))
        assert allowed_ids(results["next-4"].mask) == list(automaton.allowed(
            automaton.advance(automaton.initial_state, first[0])))

    loop.run_until_complete(main())


MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"


class RawClient:
    """A DEALER speaking the protocol by hand, so the worker's own answers (not the pool's recovery) show."""

    def __init__(self, endpoint: str):
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.rid = 0

    def call(self, msg, timeout_ms: int = 60_000):
        self.rid += 1
        self.sock.send(frame(self.rid, encode_message(msg)))
        assert self.sock.poll(timeout_ms), "no reply from the worker"
        message = self.sock.recv()
        assert unpack_id(message[:8]) == self.rid
        return decode_reply(message[8:])

    def close(self):
        self.sock.close()
        self.context.term()


@pytest.mark.parametrize("flags", [["--max-constraints", "1"], ["--max-constraint-states", "1"]])
def test_serve_flags_bound_the_constraint_cache(flags):
    """Compile A, use it, compile B, use it: with either bound at 1 the worker has dropped A, says so per
    query (unknown_constraint), and compiling A again gives the same id and start state."""
    run_dir = tempfile.mkdtemp(prefix="tokworker-guide-")
    endpoint = f"ipc://{run_dir}/sock"
    daemon = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL), "--bind",
                               endpoint, *flags], env={**os.environ, "PYTHONPATH": str(MODEL.parents[2])},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = RawClient(endpoint)
    try:
        refused = client.call(Hello(version=PROTOCOL_VERSION - 1))
        assert isinstance(refused, ErrorReply) and refused.code == ErrorCode.UNSUPPORTED_VERSION
        assert isinstance(client.call(Hello(version=PROTOCOL_VERSION, session="s")), HelloReply)
        compile_a, compile_b = Compile(pattern="(yes|no), [a-z]+"), Compile(json_schema=SCHEMA)
        a = client.call(compile_a)
        assert isinstance(a, CompileReply)
        query_a = {"a": GuideQuery(constraint_id=a.constraint_id, state=a.initial_state)}
        assert "a" in client.call(Guide(queries=query_a)).results
        b = client.call(compile_b)
        query_b = {"b": GuideQuery(constraint_id=b.constraint_id, state=b.initial_state)}
        assert "b" in client.call(Guide(queries=query_b)).results
        evicted = client.call(Guide(queries={**query_a, **query_b}))
        assert list(evicted.results) == ["b"] and evicted.errors["a"].code == ErrorCode.UNKNOWN_CONSTRAINT
        again = client.call(compile_a)
        assert (again.constraint_id, again.initial_state) == (a.constraint_id, a.initial_state)
        assert "a" in client.call(Guide(queries=query_a)).results
    finally:
        client.close()
        daemon.send_signal(signal.SIGTERM)
        status = daemon.wait(20)
    assert status == 0, daemon.stderr.read()


def _cache(tokenizer, **bounds):
    from tokworker.worker.constraints import ConstraintCache
    from tokworker.worker.options import WorkerOptions
    return ConstraintCache(tokenizer, WorkerOptions(model_dir=str(MODEL), bind="ipc:///unused", **bounds), "test")


def test_client_chosen_states_stay_within_the_memory_bound(qwen3):
    """Guide queries that name states of their own choosing compile each one (~0.75 MB on this vocabulary
    for a state that allows most tokens): 10,000 of them grew a worker from 148 MB to 3.8 GB. The cache is
    priced in bytes as each state is compiled, the automaton in use included."""
    from bench.constrain import FLIGHT
    _, _, tokenizer, _ = qwen3
    cache = _cache(tokenizer, max_constraint_mb=16, max_constraint_states=100_000)
    reply = cache.compile(Compile(tools=[WEATHER_TOOL, FLIGHT], format="hermes"))
    states = range(1, min(cache.entries[reply.constraint_id].automaton.dfa.num_states, 200))
    for batch in (states[i:i + 50] for i in range(0, len(states), 50)):
        queries = {f"q{state}": GuideQuery(constraint_id=reply.constraint_id, state=state) for state in batch}
        guided = cache.guide(Guide(queries=queries))
        assert len(guided.results) + len(guided.errors) == len(queries)
        entry = cache.entries[reply.constraint_id]
        assert entry.cost() <= 16 << 20, f"{entry.cost() / 2**20:.1f} MiB cached"
    assert len(entry.states) < len(states)           # the bound did bite: states were dropped
    assert entry.automaton.compiled_states() == set(entry.states)


def test_a_failed_request_leaves_nothing_it_compiled(qwen3):
    """A guide or compile stopped by the worker's budget drops what it had compiled."""
    from bench.constrain import FLIGHT
    from tokworker.constrain import regex_dfa
    from tokworker.worker.limits import BudgetExceeded, CpuBudget
    _, _, tokenizer, _ = qwen3
    cache = _cache(tokenizer)
    reply = cache.compile(Compile(tools=[WEATHER_TOOL, FLIGHT], format="hermes"))
    entry = cache.entries[reply.constraint_id]
    kept = dict(entry.states)
    queries = {f"q{state}": GuideQuery(constraint_id=reply.constraint_id, state=state) for state in range(1, 200)}
    with pytest.raises(BudgetExceeded):
        CpuBudget().run(0.05, cache.guide, Guide(queries=queries))
    assert dict(entry.states) == kept and entry.automaton.compiled_states() == set(kept)
    before = set(cache.entries)
    regex_dfa._CACHE.clear()
    with pytest.raises(BudgetExceeded):
        CpuBudget().run(0.02, cache.compile, Compile(tools=[FLIGHT], tool_name="book_flight", format="hermes"))
    assert set(cache.entries) == before

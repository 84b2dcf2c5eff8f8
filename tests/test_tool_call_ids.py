"""Call ids are unique across workers, daemons and restarts, are not guessable from an earlier one, and
are what each template takes back.

100,000 ids come from real streams in four worker processes, spawned by two pools in two separate
processes (as two API processes, or two daemons, would): hermes calls (OpenAI's call_ + 24 hex digits) and
Mistral calls (9 letters and digits, the only ids its templates take). None repeats; every one has its
template's shape, and a sample of each is rendered back through a real template with its tool results.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.chat_corpus import NOW
from tests.realdata import chat_templates
from tests.tool_formats import stream
from tokworker.parsers.tools import TOOL_PARSERS, get_tool_parser
from tokworker.parsers.tools.core.callids import call_id

CALLS_PER_STREAM = 500
STREAMS_PER_PROCESS = 100  # half hermes, half mistral: 50,000 ids per process
# One process: a pool of two workers; every stream's calls go in one step, ten streams a step.
POOL_SCRIPT = """
import asyncio, json, sys
from tokworker.frontend import TokenizerPool
from tokworker.protocol.deltas import StreamParams
from tokworker.worker.options import DEFAULT_MODEL_DIR

TEXTS = {"hermes": '<tool_call>{"name": "f", "arguments": {}}</tool_call>' * %(calls)d,
         "mistral": "[TOOL_CALLS]f[ARGS]{}" * %(calls)d}

async def main():
    pool = await TokenizerPool.spawn(DEFAULT_MODEL_DIR, workers=2)
    try:
        ids = dict(zip(TEXTS, await pool.encode(list(TEXTS.values()))))
        found = {"hermes": [], "mistral": []}
        names = [(f"s{i}", "hermes" if i %% 2 else "mistral") for i in range(%(streams)d)]
        for start in range(0, len(names), 10):
            batch = names[start:start + 10]
            for name, parser in batch:
                await pool.open_stream(name, StreamParams(tool_parser=parser))
            updates = await pool.step({name: ids[parser] for name, parser in batch})
            for name, parser in batch:
                found[parser] += [part.id for delta in updates[name].deltas for part in delta.tool_calls or ()
                                  if part.id is not None]
            await pool.close_stream(*(name for name, _ in batch))
        workers = [(s.pid, s.streams_opened) for s in await pool.stats()]
    finally:
        await pool.close()
    json.dump({"ids": found, "workers": workers}, sys.stdout)

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def pooled_ids():
    """Run the two processes at once; each reports its ids and its workers (pid, streams opened)."""
    script = POOL_SCRIPT % {"calls": CALLS_PER_STREAM, "streams": STREAMS_PER_PROCESS}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=os.environ.copy()) for _ in range(2)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
        reports.append(json.loads(out))
    return reports


@pytest.mark.slow  # two processes of worker processes
def test_100000_ids_from_four_workers_in_two_processes_never_repeat(pooled_ids):
    workers = [pid for report in pooled_ids for pid, opened in report["workers"] if opened]
    assert len(set(workers)) == 4  # every worker of both pools served streams
    hermes = [i for report in pooled_ids for i in report["ids"]["hermes"]]
    mistral = [i for report in pooled_ids for i in report["ids"]["mistral"]]
    assert len(hermes) + len(mistral) == 2 * STREAMS_PER_PROCESS * CALLS_PER_STREAM == 100_000
    assert len(set(hermes)) == len(hermes) and len(set(mistral)) == len(mistral)
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in hermes)
    assert all(re.fullmatch(r"[0-9A-Za-z]{9}", i) for i in mistral)  # the check Mistral's templates make


def test_consecutive_ids_share_nothing_an_attacker_could_extend():
    """Two ids in a row from one process: no common prefix or counter a client could step from."""
    for style, width in (("openai", 24), ("alnum9", 9)):
        ids = [call_id(style, "f", 0)[-width:] for _ in range(2000)]
        assert len(set(ids)) == len(ids)
        # every position takes many values (a counter's high digits, or a per-process prefix, would not)
        for position in range(width):
            assert len({i[position] for i in ids}) > 10, (style, position)


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.slow  # the pooled ids come from worker processes
@pytest.mark.parametrize("file,ids_of", [("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"),
                                         ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral")])
def test_the_templates_take_the_ids_back(pooled_ids, file, ids_of):
    """A sample of the pooled ids goes back through the real template, each call answered by its result:
    Mistral's templates raise on an id that is not nine alphanumerics (templates that write no ids, such as
    Qwen3's, could not fail here)."""
    from tokworker.templates import render_chat
    entry = chat_templates().get(file)
    if entry is None:
        pytest.skip(f"{file} is not in ../shared/fixtures")
    sample = pooled_ids[0]["ids"][ids_of][:20] + pooled_ids[1]["ids"][ids_of][-20:]
    history = [{"role": "user", "content": "Call f."}]
    for i in sample:
        history += [{"role": "assistant", "content": "", "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": "f", "arguments": {}}}]},
                    {"role": "tool", "tool_call_id": i, "content": "done " + i}]
    variables = {k: entry[k] for k in ("bos_token", "eos_token") if entry.get(k)}
    rendered = render_chat(entry["text"], history, tools=TOOLS, add_generation_prompt=True, now=NOW, **variables)
    for i in sample:
        assert "done " + i in rendered


def _ids(name, text, tools=None):
    deltas = stream(name, list(text), tools)
    return [part.id for d in deltas for part in d.tool_calls or () if part.id is not None]


def test_mistral_ids_are_nine_alphanumerics_and_unique():
    ids = _ids("mistral", "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{}") + _ids("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {}}]')
    ids += [get_tool_parser("mistral").parse("[TOOL_CALLS]f[ARGS]{}")[1][0]["id"] for _ in range(200)]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids), ids
    assert len(set(ids)) == len(ids)


def test_mistral_keeps_a_call_id_the_model_wrote_when_the_templates_take_it():
    assert _ids("mistral", '[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"x": 1}') == ["a1B2c3D4e"]
    other = _ids("mistral", "[TOOL_CALLS]f[CALL_ID]call_1[ARGS]{}")  # not 9 alphanumerics: ours instead
    assert len(other) == 1 and re.fullmatch(r"[A-Za-z0-9]{9}", other[0]) and other[0] != "call_1"


def test_kimi_ids_are_the_ones_the_model_wrote():
    """Kimi K2's template writes each call under functions.NAME:IDX and its result as "## Return of ID"."""
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:3<|tool_call_argument_begin|>{}"
            "<|tool_call_end|><|tool_call_begin|>now<|tool_call_argument_begin|>{}<|tool_call_end|>"
            "<|tool_calls_section_end|>")
    assert _ids("kimi_k2", text) == ["functions.get_weather:3", "functions.now:1"]
    assert [c["id"] for c in get_tool_parser("kimi_k2").parse(text)[1]] == ["functions.get_weather:3", "functions.now:1"]


@pytest.mark.parametrize("name", sorted(set(TOOL_PARSERS) - {"mistral", "kimi_k2"}))
def test_other_formats_issue_openai_ids(name):
    assert re.fullmatch(r"call_[0-9a-f]{24}", call_id(get_tool_parser(name).id_style, "f", 0))

"""The Engine seam on its own: ids that arrive between two ticks of the server's loop become one step, an
in-process engine written as its docstring says serves the front door, constrained requests get their token
masks from the pool each step (and the replay engine's scripted tokens are checked against them), and
requests end at eos, stop token ids and max_tokens; a listener (the server's step loop) is told once a turn."""

from __future__ import annotations

import asyncio
from array import array

import msgspec
import openai
import pytest
import requests

from api_server import running
from tokworker.api.options import ApiOptions
from tokworker.engines.base import Engine, EngineOutput, Guide, SamplingParams
from tokworker.engines.inprocess import InProcessEngine, allowed
from tokworker.engines.llama_cpp import LlamaCppEngine
from tokworker.engines.replay import ReplayEngine, shortest_match
from tokworker.engines.sglang import SglangEngine
from tokworker.engines.vllm import VllmEngine
from tokworker.frontend import TokenizerPool

pytestmark = pytest.mark.slow  # the front door on worker processes


def test_ids_arriving_between_two_ticks_are_one_step():
    async def main():
        engine = Engine()
        await Engine.start(engine, None)
        engine.emit("a", [1], [(-0.1, [(1, -0.1)])])
        engine.emit("b", [7])
        engine.emit("a", [2, 3], [(-0.2, [(2, -0.2)]), (-0.3, [(3, -0.3)])], finish="stop")
        outputs = {out.request_id: out for out in await engine.outputs()}
        assert outputs["a"].ids == [1, 2, 3] and outputs["a"].finish == "stop"
        assert [lp for lp, _ in outputs["a"].logprobs] == [-0.1, -0.2, -0.3]
        assert outputs["b"].ids == [7] and outputs["b"].finish is None
        waiting = asyncio.ensure_future(engine.outputs())
        await asyncio.sleep(0.01)
        assert not waiting.done()                         # nothing emitted since: outputs() waits
        engine.emit_threadsafe([EngineOutput("c", [4])])
        assert [out.request_id for out in await asyncio.wait_for(waiting, 5)] == ["c"]

    asyncio.run(main())


def test_a_listener_is_called_once_a_turn_for_ids_emitted_on_the_loop_and_at_once_for_a_threads_step():
    async def main():
        engine = Engine()
        await Engine.start(engine, None)
        taken: list[list] = []
        engine.emit("early", [5])                          # before anyone listens: told once it does
        engine.listen(lambda: taken.append(sorted((o.request_id, o.ids) for o in engine.take_outputs())))
        assert taken == []
        await asyncio.sleep(0)
        assert taken == [[("early", [5])]]
        engine.emit("a", [1])
        engine.emit("b", [2])
        engine.emit("a", [3])
        assert len(taken) == 1                            # not yet: what else comes on this turn joins
        await asyncio.sleep(0)
        assert taken[1:] == [[("a", [1, 3]), ("b", [2])]]
        engine._emit_all([EngineOutput("c", [4])])        # a thread's step, as call_soon_threadsafe runs it
        assert taken[2:] == [[("c", [4])]]
        engine.listen(None)
        engine.emit("d", [6])
        await asyncio.sleep(0)
        assert len(taken) == 3 and [o.ids for o in await engine.outputs()] == [[6]]

    asyncio.run(main())


class Reverse(InProcessEngine):
    """An engine written as InProcessEngine's docstring shows: each step, one token per request, here the
    prompt's ids played backwards (a stand-in for a model's argmax)."""

    name = "reverse"

    def __init__(self):
        super().__init__()
        self.prompts = []                   # each request's prompt ids as the engine got them

    async def prepare(self, running):
        self.prompts.append(running.prompt_ids)

    def step(self, batch):
        return [EngineOutput(r.request_id, [r.prompt_ids[-1 - len(r.output_ids) % len(r.prompt_ids)]])
                for r in batch]


def test_an_in_process_engine_serves_the_front_door():
    engine = Reverse()
    with running(engine=engine, options=ApiOptions(served_model_name=["reverse"]), workers=1) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        reply = client.completions.create(model="reverse", prompt=" one two three", max_tokens=3)
        assert reply.choices[0].text == " three two one" and reply.choices[0].finish_reason == "length"
        stopped = client.completions.create(model="reverse", prompt=[9, 8, 5, 6], max_tokens=8,
                                            extra_body={"stop_token_ids": [8]})
        assert stopped.usage.completion_tokens == 3 and stopped.choices[0].finish_reason == "stop"
        assert engine.prompts[-1] == [9, 8, 5, 6]


@pytest.mark.parametrize("direct", [True, False])
def test_a_chats_prompt_reaches_an_in_process_engine_packed_and_equal_to_its_render(direct):
    """A chat's prompt comes from its worker packed: the in-process engine gets it as an array('I') (no list of
    ints built for it) holding the render's ids, and indexes it as a list (the reply is the prompt backwards)."""
    engine = Reverse()
    chat = [{"role": "user", "content": "one two three 日本語"}]
    with running(engine=engine, options=ApiOptions(served_model_name=["reverse"], direct_streaming=direct),
                 workers=1) as server:
        reference = requests.post(server.url + "/tokenize",
                                  json={"model": "reverse", "messages": chat}).json()["tokens"]
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        whole = client.chat.completions.create(model="reverse", messages=chat, max_tokens=3)
        chunks = list(client.chat.completions.create(model="reverse", messages=chat, max_tokens=3, stream=True))
        with_ids = client.chat.completions.create(model="reverse", messages=chat, max_tokens=3,
                                                  extra_body={"return_token_ids": True})
    packed, streamed, listed = engine.prompts
    assert type(packed) is type(streamed) is array and packed.tolist() == streamed.tolist() == reference
    assert listed == reference and with_ids.model_extra["prompt_token_ids"] == reference   # the JSON's: a list
    assert whole.usage.prompt_tokens == len(reference)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == with_ids.choices[0].message.content


def test_the_http_engines_send_a_packed_prompt_as_the_list_it_holds():
    """The HTTP adapters write a prompt held as an array('I') into their JSON bodies as a list, equal to the
    same prompt given as a list (ids past 2**16 included)."""
    reference = [0, 1, 151643, 70000, 5, (1 << 32) - 1]
    sampling = SamplingParams(max_tokens=4)
    fields = {VllmEngine: "token_ids", SglangEngine: "input_ids", LlamaCppEngine: "prompt"}
    for kind, field in fields.items():
        engine = kind("http://127.0.0.1:9")
        from_array = engine.body("r", array("I", reference), sampling)
        assert type(from_array[field]) is list and from_array == engine.body("r", reference, sampling)
        assert msgspec.json.decode(msgspec.json.encode(from_array))[field] == reference


def test_constrained_requests_get_masks_each_step_and_the_replay_is_held_to_them():
    async def main():
        async with await TokenizerPool.spawn(workers=1) as pool:
            engine = ReplayEngine(step_interval=0.0)
            await engine.start(pool)
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
            await engine.add("r", await pool.encode("x"), SamplingParams(max_tokens=64, guide=Guide(json_schema=schema)))
            ids = []
            while True:
                (out,) = await engine.outputs()
                ids += out.ids
                if out.finish:
                    break
            assert "r" not in engine.running_table and ids[-1] in pool.info.eos_token_ids   # eos once whole
            text = await pool.decode(ids, skip_special_tokens=True)
            constraint = await pool.compile(json_schema=schema)
            assert text == shortest_match(constraint.pattern) and text in ('{"ok": true}', '{"ok": false}')
            step = (await pool.guide({"q": (constraint, constraint.initial_state, [])}))["q"]
            assert allowed(step.mask, ids[0]) and not allowed(step.mask, pool.info.eos_token_ids[0])
            await engine.close()

    asyncio.run(main())

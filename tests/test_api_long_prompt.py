"""A chat long enough for its worker to cut (over SPLIT_CHARS), through the real front door and the openai SDK
on three workers: served streamed (by its worker, directly) and whole, with the prompt's token count of one
render (usage.prompt_tokens equals /tokenize's count, which renders it whole), and its context still
checked on the joined ids."""

from __future__ import annotations

import openai
import pytest
import requests

from api_server import SCENARIOS, running
from tokworker.api.options import ApiOptions
from tokworker.engines.replay import ReplayEngine
from tokworker.worker.handlers import SPLIT_CHARS

pytestmark = pytest.mark.slow  # worker processes


def long_chat() -> list[dict]:
    from bench.pool import new_chats
    chat = [message for part in new_chats(24, seed=21) for message in part]
    assert sum(len(message["content"]) for message in chat) > SPLIT_CHARS
    return chat + [{"role": "user", "content": "And now, scenario:plain"}]


def test_a_long_chat_is_served_with_the_prompt_of_one_render():
    from api_server import script

    chat = long_chat()
    engine = ReplayEngine(script, step_interval=0.002, max_model_len=1 << 17)
    with running(engine=engine, workers=3, options=ApiOptions(served_model_name=["tokworker-test"])) as server:
        counted = requests.post(server.url + "/tokenize", json={"model": "tokworker-test", "messages": chat},
                                timeout=60).json()["count"]
        assert counted > 30_000
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        before = [stats.requests for stats in server.call(server.pool.stats())]
        whole = client.chat.completions.create(model="tokworker-test", messages=chat)
        after = [stats.requests for stats in server.call(server.pool.stats())]
        # its runs went to the least loaded workers at once (the one that rendered it is free again by then)
        assert sum(b > a for a, b in zip(before, after)) >= 2, (before, after)
        assert whole.choices[0].message.content == SCENARIOS["plain"]
        assert whole.usage.prompt_tokens == counted
        events = list(client.chat.completions.create(model="tokworker-test", messages=chat, stream=True,
                                                     stream_options={"include_usage": True}))
        assert "".join(e.choices[0].delta.content or "" for e in events if e.choices) == SCENARIOS["plain"]
        assert events[-1].usage.prompt_tokens == counted
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="tokworker-test", messages=chat, max_tokens=(1 << 17) - counted + 1)
        assert "context" in refused.value.message
        server.settled(5)
        assert server.pool.open_streams == 0

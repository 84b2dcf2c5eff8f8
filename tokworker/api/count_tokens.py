"""Anthropic's POST /v1/messages/count_tokens: the prompt tokens a Messages request would have, rendered as
/v1/messages renders it (plan_messages: system, tools, thinking), answered as `{"input_tokens": N}`.

    app.router.add_routes(CountTokens(api).routes())
"""

from __future__ import annotations

from aiohttp import web

from tokworker.api.plan import plan_messages
from tokworker.api.render import json_response
from tokworker.api.requests import CountTokensRequest, MessagesRequest


class CountTokens:
    def __init__(self, api):
        self.api = api

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages/count_tokens", self.count)]

    async def count(self, request: web.Request) -> web.Response:
        api = self.api
        body = api.decode(await api.read(request), CountTokensRequest)
        messages = MessagesRequest(model=body.model, messages=body.messages, max_tokens=1, system=body.system,
                                   tools=body.tools, tool_choice=body.tool_choice, thinking=body.thinking)
        plan = plan_messages(messages, api.served)
        return json_response({"input_tokens": len((await api.pool.render(**plan.render)).ids)})

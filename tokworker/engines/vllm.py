"""vLLM's tokens-only server as an engine (`vllm serve MODEL --tokens-only`, or any vLLM >= 0.33 server with
its scale-out routes): token ids in, token ids out, over POST /inference/v1/generate.

Each request is one streamed GenerateRequest: `token_ids`, `sampling_params` under vLLM's SamplingParams
names (`detokenize` off: tokworker reads every id itself), `request_id`. Each SSE event is a
GenerateTokensStreamResponse whose one choice carries the step's `token_ids`, `finish_reason` and, when asked,
`logprobs.content` (the sampled id's logprob, rank and its top candidates, by id). A Guide becomes vLLM's
`structured_outputs`: `json` for a schema, `regex` for a forced tool call. Abort closes the request's
connection and POSTs /inference/v1/abort_requests with the id vLLM named in the stream (vLLM prefixes
its own to ours).

    engine = VllmEngine("http://127.0.0.1:8000")
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from tokworker.engines.base import EngineError, SamplingParams, id_list
from tokworker.engines.http import DONE, HttpEngine, guide_pattern
from tokworker.protocol.messages import ErrorCode

FINISHES = {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}
UNRANKED = 1 << 62                              # vLLM sends rank None for a NaN logprob: last


class _Candidate(msgspec.Struct):
    token_id: int
    logprob: float
    rank: int | None = None


class _Sampled(msgspec.Struct):
    token_id: int
    logprob: float
    top_logprobs: list[_Candidate] = []


class _Logprobs(msgspec.Struct):
    content: list[_Sampled] | None = None


class _Choice(msgspec.Struct):
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


class _Event(msgspec.Struct):
    request_id: str | None = None
    choices: list[_Choice] = []
    error: dict | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class VllmEngine(HttpEngine):
    name = "vllm"
    route = "/inference/v1/generate"

    def body(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> dict:
        """The GenerateRequest for these ids and this sampling (vLLM's SamplingParams names)."""
        params = {"max_tokens": sampling.max_tokens, "detokenize": False, **sampling.knobs()}
        if sampling.logprobs is not None:
            params["logprobs"] = sampling.logprobs
        guide = sampling.guide
        if guide is not None:
            params["structured_outputs"] = {"json": guide.json_schema} if guide.json_schema is not None else \
                {"regex": guide_pattern(guide, self.name)}
        return {"request_id": request_id, "token_ids": id_list(prompt_ids), "sampling_params": params, "stream": True}

    def read(self, request_id: str, payload: bytes, sampling: SamplingParams) -> bool:
        if payload == DONE:
            raise EngineError(ErrorCode.ENGINE_ERROR, "vllm ended the stream without a finish_reason")
        event = _decode_event(payload)
        if event.error is not None:
            raise EngineError(ErrorCode.ENGINE_ERROR, f"vllm failed the request: {event.error.get('message')}")
        if request_id not in self.kept and event.request_id is not None:
            self.kept[request_id] = event.request_id        # the id vLLM knows it by, for its abort route
        for choice in event.choices:
            finish = choice.finish_reason
            if finish is not None:
                finish = FINISHES.get(finish, "stop")
            ids = choice.token_ids or []
            if ids or finish is not None:
                self.emit(request_id, ids, _logprobs(choice.logprobs, sampling.logprobs), finish)
            if finish is not None:
                return True
        return False

    def abort_posts(self, request_ids: list[str]) -> list[tuple[str, dict]]:
        named = [self.kept[request_id] for request_id in request_ids if request_id in self.kept]
        return [("/inference/v1/abort_requests", {"request_ids": named})] if named else []


def _logprobs(logprobs: _Logprobs | None, top: int | None) -> list | None:
    """vLLM lists the sampled candidate first, then the top k (k + 1 entries when the sampled one is not
    among them): ours are the top `top` by rank, or the sampled one's own for top 0."""
    if top is None or logprobs is None:
        return None
    out = []
    for sampled in logprobs.content or ():
        ranked = sorted(sampled.top_logprobs, key=lambda c: c.rank or UNRANKED)[:top]
        out.append((sampled.logprob, [(c.token_id, c.logprob) for c in ranked] or
                    [(sampled.token_id, sampled.logprob)]))
    return out

"""SGLang's native /generate as an engine (`python -m sglang.launch_server --skip-tokenizer-init`): token ids
in, token ids out.

Each request is one streamed GenerateReqInput: `input_ids`, `sampling_params` under SGLang's names
(max_new_tokens, sampling_seed, min_new_tokens, json_schema as a string, regex), `rid`, and
`return_logprob` / `top_logprobs_num` for logprobs. Each SSE event is `{"output_ids": [...], "meta_info":
{"finish_reason": null | {"type": "stop" | "length" | "abort", ...}, "completion_tokens": n,
"output_token_logprobs": [[logprob, id, null], ...], "output_top_logprobs": [[[logprob, id, null], ...],
...]}}`. By default SGLang sends every id so far in each event; started with `--incremental-streaming-output`
it sends only the new ones (cheaper for both sides): `completion_tokens` tells the two apart (a delta holds
exactly the ids past those handed out; SGLang serializes its running list, which may have grown since).
Abort closes the request's connection and POSTs /abort_request with the rid.

    engine = SglangEngine("http://127.0.0.1:30000")
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from tokworker.engines.base import EngineError, SamplingParams, id_list
from tokworker.engines.http import DONE, STATUS_CODES, HttpEngine, guide_pattern
from tokworker.protocol.messages import ErrorCode

RENAMED = {"seed": "sampling_seed", "min_tokens": "min_new_tokens"}        # SGLang's names where not vLLM's
FINISHES = {"stop": "stop", "length": "length", "abort": "abort"}


class _Meta(msgspec.Struct):
    finish_reason: dict | None = None
    completion_tokens: int | None = None
    output_token_logprobs: list | None = None
    output_top_logprobs: list | None = None


class _Event(msgspec.Struct):
    output_ids: list[int] = []
    meta_info: _Meta | None = None
    error: dict | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class SglangEngine(HttpEngine):
    name = "sglang"
    route = "/generate"

    def body(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> dict:
        """The GenerateReqInput for these ids and this sampling (SGLang's sampling names)."""
        params = {"max_new_tokens": sampling.max_tokens, **sampling.knobs(RENAMED)}
        guide = sampling.guide
        if guide is not None:
            if guide.json_schema is not None:
                params["json_schema"] = msgspec.json.encode(guide.json_schema).decode()
            else:
                params["regex"] = guide_pattern(guide, self.name)
        body = {"rid": request_id, "input_ids": id_list(prompt_ids), "sampling_params": params, "stream": True}
        if sampling.logprobs is not None:
            body.update(return_logprob=True, top_logprobs_num=sampling.logprobs)
        return body

    def read(self, request_id: str, payload: bytes, sampling: SamplingParams) -> bool:
        if payload == DONE:
            raise EngineError(ErrorCode.ENGINE_ERROR, "sglang ended the stream without a finish_reason")
        event = _decode_event(payload)
        if event.error is not None:
            raise EngineError(STATUS_CODES.get(event.error.get("code"), ErrorCode.ENGINE_ERROR),
                              f"sglang failed the request: {event.error.get('message')}")
        meta = event.meta_info or _Meta()
        ids, seen = event.output_ids, self.kept.get(request_id, 0)      # kept: the ids handed out so far
        total = meta.completion_tokens                 # a delta holds total - seen ids; every id so far, more
        if total is not None and len(ids) != total - seen:
            ids = ids[seen:]
        self.kept[request_id] = seen + len(ids)
        reason = meta.finish_reason
        finish = None if reason is None else FINISHES.get(reason.get("type"), "stop")
        if finish == "abort" and reason.get("status_code"):   # the scheduler refused it (a long prompt, ...)
            raise EngineError(STATUS_CODES.get(reason["status_code"], ErrorCode.ENGINE_ERROR),
                              f"sglang aborted the request: {reason.get('message')}")
        if ids or finish is not None:
            self.emit(request_id, ids, _logprobs(meta, len(ids), sampling.logprobs), finish)
        return finish is not None

    def abort_posts(self, request_ids: list[str]) -> list[tuple[str, dict]]:
        return [("/abort_request", {"rid": request_id}) for request_id in request_ids]


def _logprobs(meta: _Meta, new: int, top: int | None) -> list | None:
    """The last `new` entries (SGLang's lists hold the whole output so far unless it streams incrementally):
    (logprob, id, text) each, the top ones per token likewise."""
    if top is None or not new:
        return None if top is None else []
    sampled = (meta.output_token_logprobs or [])[-new:]
    tops = (meta.output_top_logprobs or [])[-new:] if top else [None] * len(sampled)
    return [(logprob, [(alt[1], alt[0]) for alt in (alternatives or ())[:top]] or [(token, logprob)])
            for (logprob, token, *_), alternatives in zip(sampled, tops)]

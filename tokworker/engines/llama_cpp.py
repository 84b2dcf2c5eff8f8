"""llama.cpp's `llama-server` as an engine: token ids in, token ids out, over its own /completion route.

Each request is one streamed POST /completion with the prompt as a list of ids, `return_tokens` (each event
carries the ids it generated), `n_probs` for logprobs and `cache_prompt` (the slot keeps the prompt's KV for a
follow-up turn). A forced tool call reaches it as a GBNF grammar (the regex the pool's masks come from,
translated by tokworker.constrain.gbnf), response_format as `json_schema`. Abort closes the request's
connection, which llama-server answers by freeing the slot. llama-server's text, stop strings and chat
templates are never used: tokworker renders and reads every token itself.

One limit is llama-server's own: while its text ends inside a UTF-8 character it holds the event back, and the
event that finally goes out carries only the last token's id (a stop in mid-character carries none), so the
ids of the held tokens never reach the adapter: a reply that starts an emoji with byte tokens is short of
them, in text and in usage (`tokens_predicted` counts them).

    engine = LlamaCppEngine("http://127.0.0.1:8080")
"""

from __future__ import annotations

import logging

from typing import Sequence

import msgspec

from tokworker.constrain.gbnf import regex_to_gbnf
from tokworker.constrain.regex_syntax import RegexError
from tokworker.engines.base import EngineError, SamplingParams, id_list
from tokworker.engines.http import HttpEngine, guide_pattern
from tokworker.protocol.messages import ErrorCode

log = logging.getLogger("tokworker.engines")
STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}
RENAMED = {"repetition_penalty": "repeat_penalty"}                       # llama-server's names where not vLLM's


class _Top(msgspec.Struct):
    id: int
    logprob: float


class _Probability(msgspec.Struct):
    id: int
    logprob: float
    top_logprobs: list[_Top] = []


class _Event(msgspec.Struct):
    tokens: list[int] = []
    stop: bool = False
    stop_type: str = "none"
    completion_probabilities: list[_Probability] = []


_decode_event = msgspec.json.Decoder(_Event).decode


class LlamaCppEngine(HttpEngine):
    name = "llama.cpp"
    route = "/completion"
    grammars = True

    def __init__(self, url: str, *, cache_prompt: bool = True, **connection):
        super().__init__(url, **connection)
        self.cache_prompt = cache_prompt

    async def probe(self, pool) -> None:
        props = await self.get_json("/props")
        settings = props.get("default_generation_settings") or {}
        self.max_model_len = settings.get("n_ctx") or props.get("n_ctx")
        vocab = (props.get("model") or {}).get("n_vocab") if isinstance(props.get("model"), dict) else None
        if vocab is not None and vocab != pool.info.vocab_size:
            log.warning("llama-server's vocabulary has %d tokens, the pool's %d: is it the same model?",
                        vocab, pool.info.vocab_size)

    def body(self, request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams) -> dict:
        """The /completion request for these ids and this sampling (llama-server's own names)."""
        body = {"prompt": id_list(prompt_ids), "stream": True, "return_tokens": True, "cache_prompt": self.cache_prompt,
                "n_predict": sampling.max_tokens, "ignore_eos": sampling.ignore_eos, **sampling.knobs(RENAMED, set_only=())}
        if sampling.logprobs is not None:
            body["n_probs"] = max(sampling.logprobs, 1)       # the sampled token's own needs one
        if sampling.logit_bias:
            body["logit_bias"] = [[token, bias] for token, bias in sampling.logit_bias.items()]
        guide = sampling.guide
        if guide is not None:
            if guide.grammar is not None:
                body["grammar"] = guide.grammar
            elif guide.json_schema is not None:
                body["json_schema"] = guide.json_schema
            else:
                try:
                    body["grammar"] = regex_to_gbnf(guide_pattern(guide, self.name))
                except (ValueError, RegexError) as error:
                    raise EngineError(ErrorCode.INVALID, f"cannot constrain llama.cpp's output: {error}")
        return body

    def read(self, request_id: str, payload: bytes, sampling: SamplingParams) -> bool:
        event = _decode_event(payload)
        finish = STOP_TYPES.get(event.stop_type, "stop") if event.stop else None
        if event.tokens or finish is not None:
            self.emit(request_id, event.tokens, _logprobs(event, sampling.logprobs), finish)
        return finish is not None


def _logprobs(event: _Event, top: int | None) -> list | None:
    if top is None:
        return None
    return [(p.logprob, [(t.id, t.logprob) for t in p.top_logprobs[:top]] or [(p.id, p.logprob)])
            for p in event.completion_probabilities]


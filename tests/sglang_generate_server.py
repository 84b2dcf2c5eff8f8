"""A stand-in for SGLang's HTTP server started with --skip-tokenizer-init, from the shapes in SGLang 0.5.23's
code (srt/entrypoints/http_server.py: /generate's stream_results and /abort_request;
srt/managers/io_struct.py GenerateReqInput; srt/sampling/sampling_params.py; srt/managers/tokenizer_manager.py:
the BatchTokenIDOutput event dicts; srt/managers/schedule_batch.py: the finish reasons' to_json). SGLang's
own server cannot run here: it needs its GPU scheduler and model runner processes.

    python tests/sglang_generate_server.py --port P --script IDS.json [--incremental] [--step-s S]

It generates the script's ids one per step and streams `data: {"output_ids", "meta_info"}` events: every id so
far in each event (SGLang's default), or only the new ones with --incremental (its
--incremental-streaming-output); finish_reason {"type": "stop", "matched": id} at the script's end or a stop
token id, {"type": "length", "length": n} at max_new_tokens, {"type": "abort", "message"} after
/abort_request. As SGLang does, it refuses sampling parameters it does not know with 400, a prompt past the
context with an error event after the 200, and treats a closed connection as an abort. What it saw is
readable for the tests: GET /standin/requests, GET /standin/aborted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from aiohttp import web

CONTEXT = 4096
SAMPLING_NAMES = {"max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
                  "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
                  "beam_width", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos",
                  "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "stream_interval",
                  "logit_bias", "sampling_seed", "custom_params", "watermark"}


class Standin:
    def __init__(self, script: list[int], step_s: float, incremental: bool):
        self.script, self.step_s, self.incremental = script, step_s, incremental
        self.requests: list[dict] = []
        self.aborted: list[str] = []
        self.abort_asked: set[str] = set()

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        params = body.get("sampling_params") or {}
        unknown = sorted(set(params) - SAMPLING_NAMES)
        if unknown or not body.get("input_ids") or not body.get("stream"):
            message = f"unknown sampling parameters {unknown}" if unknown else \
                "this stand-in serves streamed input_ids requests only"
            return web.json_response({"error": {"message": message, "code": 400}}, status=400)
        rid = body.get("rid") or f"rid-{len(self.requests)}"
        self.requests.append(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        send = lambda event: response.write(b"data: " + json.dumps(event).encode() + b"\n\n")  # noqa: E731
        max_new = params.get("max_new_tokens", 128)
        if len(body["input_ids"]) + max_new > CONTEXT:          # tokenizer_manager's ValueError, streamed
            await send({"error": {"message": f"Requested token count exceeds the model's maximum context "
                                             f"length of {CONTEXT} tokens.", "type": "invalid_request_error",
                                  "code": 400, "retryable": False}})
            await response.write(b"data: [DONE]\n\n")
            return response
        top = body.get("top_logprobs_num") or 0
        stops = set(params.get("stop_token_ids") or ())
        ids, logprobs, tops, sent_offset = [], [], [], 0
        try:
            while True:
                await asyncio.sleep(self.step_s)
                finish = None
                if rid in self.abort_asked:
                    finish = {"type": "abort", "message": "Abort in waiting queue", "status_code": None,
                              "err_type": None}
                else:
                    token = self.script[len(ids)]
                    ids.append(token)
                    logprobs.append([-0.5, token, None])
                    tops.append([[-0.5 - k, token + k, None] for k in range(top)])
                    if token in stops or len(ids) == len(self.script):
                        finish = {"type": "stop", "matched": token}
                    elif len(ids) >= max_new:
                        finish = {"type": "length", "length": len(ids)}
                start = sent_offset if self.incremental else 0
                meta = {"id": rid, "finish_reason": finish, "prompt_tokens": len(body["input_ids"]),
                        "completion_tokens": len(ids), "cached_tokens": 0}
                if body.get("return_logprob"):
                    meta["output_token_logprobs"] = logprobs[start:]
                    if top:
                        meta["output_top_logprobs"] = tops[start:]
                await send({"output_ids": ids[start:], "meta_info": meta})
                sent_offset = len(ids)
                if finish is not None:
                    break
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.aborted.append(rid)                 # SGLang's background abort task for a gone client
            raise
        return response

    async def abort_request(self, request: web.Request) -> web.Response:
        rid = (await request.json()).get("rid")
        self.abort_asked.add(rid)
        self.aborted.append(rid)
        return web.Response(status=200)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", required=True)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--incremental", action="store_true")
    args = parser.parse_args()
    standin = Standin(json.loads(Path(args.script).read_text()), args.step_s, args.incremental)
    models = {"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "sglang",
                                          "root": "standin", "max_model_len": CONTEXT}]}
    app = web.Application()
    app.add_routes([web.post("/generate", standin.generate), web.post("/abort_request", standin.abort_request),
                    web.get("/v1/models", lambda _: web.json_response(models)),
                    web.get("/health", lambda _: web.Response()),
                    web.get("/standin/requests", lambda _: web.json_response(standin.requests)),
                    web.get("/standin/aborted", lambda _: web.json_response(standin.aborted))])
    web.run_app(app, host="127.0.0.1", port=args.port, handler_cancellation=True, print=None)


if __name__ == "__main__":
    main()

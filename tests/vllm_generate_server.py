"""vLLM 0.33's tokens-only server (`vllm serve --tokens-only`: POST /inference/v1/generate, /abort_requests)
with a scripted engine behind it. Run by the python of a vLLM install, not by tokworker's:

    /path/to/vllm-venv/bin/python tests/vllm_generate_server.py --model DIR --port P --script IDS.json

Real: vLLM's FastAPI app (build_app), its scale-out routers, GenerateRequest / SamplingParams validation,
ServingTokens (request ids, max_tokens defaulting, logprob and SSE chunk shapes, error responses) and the
ASGI server. Standing in: the engine. `ScriptedEngine.generate` yields `RequestOutput` deltas as vLLM's
AsyncLLM does, the ids of the script file one per step (`--step-s` apart), ending "stop" at the script's end
or a stop token id, "length" at max_tokens, "error" after two ids for seed 666 (an engine failing
mid-stream); logprobs are made up (the sampled id -0.5, rank 1, then id+1 ...).
What the engine saw is readable for the tests: GET /standin/requests (each request's id, prompt ids and
sampling parameters) and GET /standin/aborted (the ids aborted: `posted` by /abort_requests, `closed` with
their stream).
DIR is a tokenizer folder; a config.json with the smallest Qwen3 shape is written beside a copy of it,
since vLLM's ModelConfig reads the architecture (no weights are loaded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path

FAIL_SEED = 666
QWEN3_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                "num_hidden_layers": 1, "max_position_embeddings": 4096, "vocab_size": 151936,
                "torch_dtype": "bfloat16", "eos_token_id": 151645, "bos_token_id": 151643}


class ScriptedEngine:
    """The EngineClient methods ServingTokens calls, generating the script's ids."""

    def __init__(self, vllm_config, renderer, script: list[int], step_s: float):
        self.vllm_config, self.model_config = vllm_config, vllm_config.model_config
        self.renderer, self.input_processor = renderer, None
        self.script, self.step_s = script, step_s
        self.requests: list[dict] = []
        self.aborted: dict[str, list[str]] = {"posted": [], "closed": []}
        self.running: set[str] = set()
        self.errored, self.dead_error = False, None

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        pass

    async def check_health(self) -> None:
        """vLLM's /health asks its engine client; the scripted engine is always up."""

    async def is_tracing_enabled(self) -> bool:
        return False

    async def abort(self, request_id) -> None:
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        self.aborted["posted"].extend(ids)
        self.running.difference_update(ids)

    async def generate(self, engine_input, sampling_params, request_id, **_):
        from vllm.logprobs import Logprob
        from vllm.outputs import CompletionOutput, RequestOutput
        from vllm.sampling_params import RequestOutputKind

        whole = sampling_params.output_kind == RequestOutputKind.FINAL_ONLY    # stream=false: one output
        ids, logprobs = [], [] if sampling_params.logprobs is not None else None
        prompt = list(engine_input["prompt_token_ids"])
        self.requests.append({"request_id": request_id, "prompt_token_ids": prompt,
                              "sampling_params": _fields(sampling_params)})
        self.running.add(request_id)
        stops = set(sampling_params.stop_token_ids or ())
        sent = 0
        try:
            while request_id in self.running:
                await asyncio.sleep(self.step_s)
                token = self.script[sent]
                sent += 1
                finish = stop_reason = None
                if token in stops:
                    finish, stop_reason = "stop", token
                elif sent == len(self.script):
                    finish = "stop"
                elif sent >= sampling_params.max_tokens:
                    finish = "length"
                elif sampling_params.seed == FAIL_SEED and sent == 2:
                    finish = "error"
                if not whole:
                    ids, logprobs = [], [] if logprobs is not None else None
                ids.append(token)
                if logprobs is not None:
                    top = {token: Logprob(-0.5, 1)}
                    top.update({token + k: Logprob(-0.5 - k, k + 1) for k in range(1, sampling_params.logprobs + 1)})
                    logprobs.append(top)
                if finish is not None or not whole:
                    output = CompletionOutput(0, "", ids, None, logprobs, finish_reason=finish,
                                              stop_reason=stop_reason)
                    yield RequestOutput(request_id, None, prompt, None, [output], finish is not None)
                if finish is not None:
                    return
            if not whole:
                ids, logprobs = [], [] if logprobs is not None else None
            output = CompletionOutput(0, "", ids, None, logprobs, finish_reason="abort")
            yield RequestOutput(request_id, None, prompt, None, [output], True)
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted["closed"].append(request_id)       # AsyncLLM aborts a request whose consumer went away
            raise
        finally:
            self.running.discard(request_id)


def _fields(sampling_params) -> dict:
    keep = ("n", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
            "repetition_penalty", "max_tokens", "min_tokens", "stop_token_ids", "ignore_eos", "logprobs",
            "logit_bias", "detokenize")
    fields = {name: getattr(sampling_params, name) for name in keep}
    structured = sampling_params.structured_outputs
    fields["structured_outputs"] = None if structured is None else \
        {k: v for k, v in vars(structured).items() if v not in (None, False) and not k.startswith("_")}
    return fields


def main() -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")      # no GPU stack: vLLM's CPU platform, as `launch render`
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--script", required=True)
    ours.add_argument("--step-s", type=float, default=0.0)
    known, rest = ours.parse_known_args()
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(rest + ["--tokens-only"])
    folder = Path(tempfile.mkdtemp(prefix="vllm-standin-"))
    for file in Path(args.model).iterdir():
        shutil.copy(file, folder / file.name)
    (folder / "config.json").write_text(json.dumps(QWEN3_CONFIG))
    args.model = args.tokenizer = str(folder)
    args.served_model_name = args.served_model_name or ["standin"]
    asyncio.run(serve(args, json.loads(Path(known.script).read_text()), known.step_s))


async def serve(args, script: list[int], step_s: float) -> None:
    import uvicorn
    from fastapi.responses import JSONResponse
    from vllm import AsyncEngineArgs, envs
    from vllm.config import VllmConfig
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.render.app_state import init_render_app_state
    from vllm.entrypoints.scale_out.token_in_token_out.serving import ServingTokens

    engine_args = AsyncEngineArgs.from_cli_args(args)
    model_config = engine_args.create_model_config()
    model_config.quantization = None
    envs.VLLM_CPU_KVCACHE_SPACE = 0
    vllm_config = VllmConfig(model_config=model_config, logging_config=engine_args.create_logging_config(),
                             structured_outputs_config=engine_args.create_structured_outputs_config())
    app = build_app(args, ("generate",))
    state = app.state
    await init_render_app_state(vllm_config, state, args)      # renderer, models: what `launch render` builds
    engine = ScriptedEngine(vllm_config, state.online_renderer.renderer, script, step_s)
    state.engine_client = engine
    state.serving_tokens = ServingTokens(engine, state.openai_serving_models, state.online_renderer,
                                         online_derenderer=state.online_derenderer, request_logger=None,
                                         force_no_detokenize=True)
    app.add_api_route("/standin/requests", lambda: JSONResponse(engine.requests), methods=["GET"])
    app.add_api_route("/standin/aborted", lambda: JSONResponse(engine.aborted), methods=["GET"])
    config = uvicorn.Config(app, host=args.host or "127.0.0.1", port=args.port, log_level="warning",
                            lifespan="off")
    await uvicorn.Server(config).serve()


if __name__ == "__main__":
    main()

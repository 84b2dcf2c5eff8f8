"""Run by a vLLM install's own python (`python -m bench --vllm-python PATH`): vLLM's API-process path per
generated token on given ids, as its OpenAI server runs it for a streaming chat request: the v1 engine's
incremental detokenizer (with stop strings), then the reasoning parser and the tool parser's streaming
extraction with the previous/current text bookkeeping serving_chat keeps. Imports vLLM, never tokworker.

argv[1]: a JSON file {"model_dir", "tools", "cases": [{"case", "ids", "reasoning", "tools", "stop"}],
"rounds"}; prints one JSON object per case: {"case", "tokens", "us_per_token"} (best round, process CPU).
"""

from __future__ import annotations

import json
import sys
import time


def _request(ids_prompt: list[int], stop: list[str]):
    from vllm import SamplingParams
    from vllm.v1.engine import EngineCoreRequest

    params = SamplingParams(stop=stop or None, max_tokens=1 << 20, skip_special_tokens=True)
    return EngineCoreRequest(request_id="bench", prompt_token_ids=ids_prompt, mm_features=None,
                             sampling_params=params, pooling_params=None, arrival_time=time.time(),
                             lora_request=None, cache_salt=None, data_parallel_rank=None)


def _one_stream(tokenizer, case: dict, tools: list[dict], chat_request) -> None:
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    detokenizer = IncrementalDetokenizer.from_new_request(tokenizer, _request([], case["stop"]))
    reasoning = ReasoningParserManager.get_reasoning_parser(case["reasoning"])(tokenizer) if case["reasoning"] else None
    tool = ToolParserManager.get_tool_parser("hermes")(tokenizer, chat_request.tools) if case["tools"] else None
    previous_text, previous_ids = "", []
    for token in case["ids"]:
        detokenizer.update([token], False)
        delta = detokenizer.get_next_output_text(False, True)
        current_text, current_ids = previous_text + delta, previous_ids + [token]
        if reasoning is not None and not reasoning.is_reasoning_end(current_ids):
            reasoning.extract_reasoning_streaming(previous_text, current_text, delta, previous_ids, current_ids,
                                                  [token])
        elif tool is not None:
            tool.extract_tool_calls_streaming(previous_text, current_text, delta, previous_ids, current_ids, [token],
                                              chat_request)
        previous_text, previous_ids = current_text, current_ids


def main(spec_path: str) -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tokenizers import get_tokenizer

    spec = json.loads(open(spec_path).read())
    tokenizer = get_tokenizer(spec["model_dir"])
    chat_request = ChatCompletionRequest(model="bench", messages=[{"role": "user", "content": "hi"}],
                                         tools=spec["tools"], stream=True)
    for case in spec["cases"]:
        best = float("inf")
        for _ in range(spec["rounds"]):
            started = time.process_time()
            _one_stream(tokenizer, case, spec["tools"], chat_request)
            best = min(best, time.process_time() - started)
        print(json.dumps({"case": case["case"], "tokens": len(case["ids"]),
                          "us_per_token": best / len(case["ids"]) * 1e6}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

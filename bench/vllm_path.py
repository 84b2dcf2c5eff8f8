"""Run by a vLLM install's own python (`python -m bench --vllm-python PATH`): vLLM's API-process path per
generated token on given ids, as its OpenAI server runs a streaming chat request: the request's parser
adjusts it (the renderer's step), the output processor's incremental detokenizer (stop strings, the eos
stop-terminated and held-back text flushed at the finish, as the engine reports it), then the chat stream
processor serving_chat keeps per choice (Parser.parse_delta: the reasoning parser, then the tool parser).
A case with "chunks" also builds each delta's chunk as serving_chat does (ChatCompletionResponseStreamChoice
in a ChatCompletionStreamResponse, `model_dump_json(exclude_unset=True, ...)`, framed as `data: ...`): the
whole API-process path up to the HTTP write. Imports vLLM, never tokworker. Written against vLLM 0.33.0.

argv[1]: a JSON file {"model_dir", "tools", "prompt_ids", "cases": [{"case", "ids", "reasoning", "tools",
"stop"}]}; then one round per case index read on stdin (see main), timed in process CPU; "setup_seconds" is
the stream's detokenizer and parser construction, included in "seconds". The texts are "content",
"reasoning", "tool_calls" ([{"name", "arguments"}]) and "finish_reason".
"""

from __future__ import annotations

import json
import sys
import time


def _server(tokenizer, case: dict, tools: list[dict], prompt_ids: list[int]):
    """What a server started with `--reasoning-parser R --enable-auto-tool-choice --tool-call-parser hermes`
    prepares for one chat request: its parser class, the request as the renderer adjusted it, and the
    engine request the output processor detokenizes for."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager
    from vllm.v1.engine import EngineCoreRequest

    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    request = ChatCompletionRequest(model="bench", messages=messages, stream=True, stop=case["stop"] or None,
                                    tools=tools if case["tools"] else None, max_completion_tokens=1 << 20)
    parser_cls = ParserManager.get_parser(tool_parser_name="hermes" if case["tools"] else None,
                                          reasoning_parser_name=case["reasoning"], enable_auto_tools=True,
                                          tokenizer=tokenizer)
    if parser_cls is not None:  # the renderer's adjustment (hermes and qwen3 keep special tokens in the text)
        adjusting = parser_cls(tokenizer, request.tools, chat_template_kwargs={})
        adjusting.set_prompt_token_ids(prompt_ids)
        request = adjusting.adjust_request(request)
    params = request.to_sampling_params(1 << 20, {})
    engine_request = EngineCoreRequest(request_id="bench", prompt_token_ids=prompt_ids, mm_features=None,
                                       sampling_params=params, pooling_params=None, arrival_time=time.time(),
                                       lora_request=None, cache_salt=None, data_parallel_rank=None)
    return request, parser_cls, engine_request


def _one_stream(tokenizer, ids: list[int], request, parser_cls, engine_request, prompt_ids, out: list,
                chunks: bool = False):
    """One stream start to end, one token per engine step; the last id is the eos, which the engine
    reports as a stop-terminated finish. Appends each step's DeltaMessage (or None) to `out`, and with
    `chunks` writes each delta's SSE event as serving_chat does. Returns the construction's CPU seconds and
    the chat finish_reason."""
    from vllm.entrypoints.openai.chat_completion.protocol import (ChatCompletionResponseStreamChoice,
                                                                    ChatCompletionStreamResponse)
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    started = time.process_time()
    detokenizer = IncrementalDetokenizer.from_new_request(tokenizer, engine_request)
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs={}) if parser_cls is not None else None
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    setup = time.process_time() - started
    update, next_text, step, append = detokenizer.update, detokenizer.get_next_output_text, processor.step, out.append
    last, chunk, events = len(ids) - 1, None, []
    for position, token in enumerate(ids):
        finished = position == last
        stop_string = update([token], finished)
        finish_reason = "stop" if finished or stop_string else None
        chunk = step(next_text(finish_reason is not None, True), [token], finish_reason, prompt_ids)
        append(chunk.delta)
        if chunks and chunk.delta is not None:
            choice = ChatCompletionResponseStreamChoice(index=0, delta=chunk.delta, logprobs=None,
                                                        finish_reason=chunk.finish_reason)
            response = ChatCompletionStreamResponse(id="chatcmpl-bench", object="chat.completion.chunk",
                                                    created=1, choices=[choice], model="bench")
            # held as a server's write queue holds them until the socket takes them (never read here)
            events.append(f"data: {response.model_dump_json(exclude_unset=True, exclude_none=False)}\n\n")
        if stop_string:
            break
    return setup, chunk.finish_reason


def _texts(deltas: list) -> dict:
    content, reasoning, calls = [], [], {}
    for delta in deltas:
        if delta is None:
            continue
        content.append(delta.content or "")
        reasoning.append(delta.reasoning or "")
        for call in delta.tool_calls or ():
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    return {"content": "".join(content), "reasoning": "".join(reasoning),
            "tool_calls": [calls[index] for index in sorted(calls)]}


def main(spec_path: str) -> None:
    """Prints {"ready": true} once loaded, then runs one round of case N for each line "N" read on stdin
    (the caller alternates them with its own rounds, so both sides meet the same load) and answers
    {"seconds", "setup_seconds"}, with the streamed texts the first time a case runs."""
    from vllm.tokenizers import get_tokenizer

    spec = json.loads(open(spec_path).read())
    tokenizer = get_tokenizer(spec["model_dir"])  # AutoTokenizer behind vLLM's cache, as `vllm serve` loads it
    prompt_ids = spec["prompt_ids"]
    servers = [_server(tokenizer, case, spec["tools"], prompt_ids) for case in spec["cases"]]
    print(json.dumps({"ready": True}), flush=True)
    reported = set()
    for line in sys.stdin:
        index = int(line)
        deltas: list = []
        started = time.process_time()
        setup, finish_reason = _one_stream(tokenizer, spec["cases"][index]["ids"], *servers[index], prompt_ids,
                                           deltas, spec["cases"][index].get("chunks", False))
        reply = {"seconds": time.process_time() - started, "setup_seconds": setup}
        if index not in reported:
            reported.add(index)
            reply.update(finish_reason=finish_reason, **_texts(deltas))
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

"""A scripted vLLM engine core, run by vLLM's python beside `vllm serve` (bench/vllm_served.py):
`python bench/vllm_standin.py PORT SCRIPT STEP_S [COUNTER]`. It answers the front end's handshake as a remote
headless engine does (HELLO, the init message, the ready response on the input socket, READY), then every
STEP_S seconds sends one `EngineCoreOutputs` (vLLM's own msgspec types and encoder, so the wire is exact)
carrying, for every running request, the next id of SCRIPT (a JSON list of ids: the reply, then the eos), with
the first output's QUEUED/SCHEDULED events and prefill stats and a SchedulerStats per step, as vLLM's scheduler
does when stats are on (`vllm serve`'s default). Idle, it steps a new request at once, as an engine core and
the replay engine do. It ends a request with "length" at its max_tokens, "stop" at the eos (unless
ignore_eos), drops aborted ones, and answers the utility calls `vllm serve` makes. COUNTER: a file of 8 bytes
where it keeps the number of ids played.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# the default tokenizer's family shape, no weights: vLLM's ModelConfig reads the architecture and sizes
CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
          "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "num_hidden_layers": 1, "vocab_size": 4096, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
          "rope_theta": 1000000, "torch_dtype": "bfloat16", "tie_word_embeddings": True, "eos_token_id": 2}


def standin(rpc_port: int, script: list[int], step_s: float, counter: str | None = None) -> None:
    import mmap
    import struct

    import msgspec
    import zmq

    from vllm.utils.network_utils import make_zmq_socket
    from vllm.v1.engine import (EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, EngineCoreOutputs,
                                EngineCoreReadyResponse, EngineCoreRequest, EngineCoreRequestType, FinishReason,
                                UtilityOutput)
    from vllm.v1.engine.utils import EngineHandshakeMetadata
    from vllm.v1.metrics.stats import PrefillStats, SchedulerStats
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult

    identity = (0).to_bytes(2, "little")        # data-parallel rank 0
    hello = {"local": False, "headless": True}  # a remote engine; with no local ones it must be headless
    ctx = zmq.Context()
    handshake = make_zmq_socket(ctx, f"tcp://127.0.0.1:{rpc_port}", zmq.DEALER, bind=False, identity=identity,
                                linger=5000)
    handshake.send(msgspec.msgpack.encode({"status": "HELLO", **hello}))
    addresses = msgspec.msgpack.decode(handshake.recv(), type=EngineHandshakeMetadata).addresses
    inputs = make_zmq_socket(ctx, addresses.inputs[0], zmq.DEALER, bind=False, identity=identity)
    outputs = make_zmq_socket(ctx, addresses.outputs[0], zmq.PUSH, linger=4000)
    ready = EngineCoreReadyResponse(
        max_model_len=CONFIG["max_position_embeddings"], num_gpu_blocks=65536, block_size=16,
        dp_stats_address=None, dtype="bfloat16", vllm_version="0.33.0", world_size=1, data_parallel_size=1,
        tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=0,
        max_num_seqs=4096, max_num_batched_tokens=65536, instance_id="standin", supports_lora=False, max_loras=0)
    inputs.send(msgspec.msgpack.encode(ready))           # lets the front end's ROUTER talk to us
    handshake.send(msgspec.msgpack.encode({"status": "READY", **hello}))

    add_decoder, generic_decoder, encoder = MsgpackDecoder(EngineCoreRequest), MsgpackDecoder(), MsgpackEncoder()
    utilities = {"get_supported_tasks": ("generate",), "reset_mm_cache": None, "reset_encoder_cache": None,
                 "is_sleeping": False, "is_scheduler_paused": False}       # the calls `vllm serve` makes
    running: dict[str, list] = {}       # request id -> [ids sent, max_tokens, stop ids, arrival, prompt length]
    last = len(script) - 1
    eos = script[-1]
    counts, played = None, 0            # the ids played so far, in `counter`'s 8 bytes (the bench reads them)
    if counter is not None:
        with open(counter, "r+b") as f:
            counts = mmap.mmap(f.fileno(), 8)

    def take_inputs() -> None:
        while inputs.poll(0):
            kind, *frames = inputs.recv_multipart(copy=False)
            kind = EngineCoreRequestType(bytes(kind.buffer))
            if kind == EngineCoreRequestType.ADD:
                request = add_decoder.decode(frames)
                params = request.sampling_params
                stops = set() if params.ignore_eos else {eos}
                running[request.request_id] = [0, params.max_tokens, stops, time.monotonic(),
                                               len(request.prompt_token_ids)]
            elif kind == EngineCoreRequestType.ABORT:
                for request_id in generic_decoder.decode(frames):
                    running.pop(request_id, None)
            elif kind == EngineCoreRequestType.UTILITY:
                _, call_id, method, _ = generic_decoder.decode(frames)
                output = UtilityOutput(call_id, result=UtilityResult(utilities[method])) if method in utilities \
                    else UtilityOutput(call_id, failure_message=f"the stand-in engine has no {method}")
                outputs.send_multipart(encoder.encode(EngineCoreOutputs(utility_output=output)))

    def step() -> None:
        nonlocal played
        now, batch, done = time.monotonic(), [], []
        for request_id, state in running.items():
            sent, max_tokens, stops, arrival, prompt = state
            token = script[min(sent, last)]
            state[0] = sent = sent + 1
            finish = FinishReason.STOP if token in stops else FinishReason.LENGTH if sent >= max_tokens else None
            first = sent == 1
            batch.append(EngineCoreOutput(
                request_id, [token], finish_reason=finish,
                events=[EngineCoreEvent(EngineCoreEventType.QUEUED, arrival),
                        EngineCoreEvent(EngineCoreEventType.SCHEDULED, now)] if first else None,
                prefill_stats=PrefillStats(prompt, prompt) if first else None))
            if finish is not None:
                done.append(request_id)
        for request_id in done:
            del running[request_id]
        stats = SchedulerStats(num_running_reqs=len(running) + len(done))
        outputs.send_multipart(encoder.encode(EngineCoreOutputs(outputs=batch, scheduler_stats=stats)))
        if counts is not None:
            played += len(batch)
            struct.pack_into("<Q", counts, 0, played)

    due = time.monotonic() + step_s
    while True:
        wait = due - time.monotonic()
        if wait > 0 and inputs.poll(wait * 1000):
            idle = not running
            take_inputs()
            if idle and running:            # an idle engine steps a new request at once (vLLM's does, and the
                due = time.monotonic()      # replay engine): a first token does not wait for a tick
            continue
        take_inputs()
        if running:
            step()
        due = max(due + step_s, time.monotonic())       # a late step is not made up by a burst


if __name__ == "__main__":
    standin(int(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), float(sys.argv[3]), *sys.argv[4:5])

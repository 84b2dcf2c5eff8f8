"""The `tokworker` command: `serve` (the daemon), `status` (a running daemon's health and counters),
`keys` (CurveZMQ key pairs), `demo` (one chat turn)."""

from __future__ import annotations

import argparse
import sys

# vLLM's names for the same settings, so a serving launcher's flags carry over.
VLLM_NAMES = {"tool_parser": "--tool-call-parser", "reasoning_parser": "--reasoning-parser"}
ALIASES = {"budget_s": ["--render-timeout"]}


def _flag(field: str) -> str:
    """budget_s -> --budget, max_text_chars -> --max-text-chars: WorkerOptions' field, in flag spelling."""
    return VLLM_NAMES.get(field) or "--" + field.removesuffix("_s").replace("_", "-")


def _json_list(text: str) -> list[str]:
    """vLLM's spelling of --allowed-origins and its siblings: a JSON list of strings ('["https://a.example"]')."""
    import json
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise argparse.ArgumentTypeError(f"not a JSON list of strings: {text!r} (as vllm serve: '[\"*\"]')")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("tokworker")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _add_worker_settings(serve: argparse.ArgumentParser) -> None:
    """One flag per WorkerOptions setting, made from its field (type, default, description, bounds are
    checked by validate_options), skipping any flag that the parser defines itself."""
    from tokworker.worker.options import settings

    for field, kind, default, description in settings():
        names = [name for name in (_flag(field), *ALIASES.get(field, [])) if name not in serve._option_string_actions]
        if not names:
            continue
        if kind is bool:
            serve.add_argument(*names, dest=field, action="store_true", help=description)
            continue
        shown = f" (default: {default})" if default is not None else ""
        metavar = "NAME" if kind is str else "SECONDS" if field.endswith("_s") else "N"
        serve.add_argument(*names, dest=field, type=kind, default=default, metavar=metavar, help=description + shown)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokworker", description="The text boundary of LLM serving, in a pool of "
                                                                   "worker processes.")
    parser.add_argument("--version", action="version", version=f"tokworker {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the worker daemon until SIGTERM (drains) or SIGINT")
    serve.add_argument("--model-dir", required=True, help="a folder with tokenizer.json (and tokenizer_config.json), or Mistral's tekken.json")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (worker i listens on base + i)")
    serve.add_argument("--bind", help="ipc:///abs/path (in a 0700 directory) or tcp://host:port (needs "
                                      "--curve-keys); default: ipc:// in $XDG_RUNTIME_DIR (or ~/.tokworker/run)")
    serve.add_argument("--curve-keys", help="key directory from `tokworker keys DIR`")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.add_argument("--enable-auto-tool-choice", action="store_true",
                       help="accepted for vLLM's command lines: tool calls are parsed whenever a request has tools")
    _add_worker_settings(serve)

    status = commands.add_parser("status", help="health and counters of a running daemon's workers")
    status.add_argument("--endpoint", help="the daemon's first worker (its --bind; default: the default bind)")
    status.add_argument("--curve-keys", help="a client key directory (server.key and client.key_secret)")
    status.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each worker")
    output = status.add_mutually_exclusive_group()
    output.add_argument("--prometheus", action="store_true", help="Prometheus text format")
    output.add_argument("--json", action="store_true", help="one JSON object per worker")

    keys = commands.add_parser("keys", help="make CurveZMQ keys: the server pair and client pairs")
    keys.add_argument("directory")
    keys.add_argument("--client", action="append", help="client name (repeatable; default: client)")

    api = commands.add_parser("api", help="the HTTP front door (OpenAI and Anthropic APIs) on a local pool and an "
                                         "engine")
    api.add_argument("--model-dir", help="a tokenizer folder (default: the bundled tokenizer)")
    api.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    api.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    api.add_argument("--engine", default="replay", help="replay (scripted replies, the default), llama.cpp, vllm "
                                                        "or sglang")
    api.add_argument("--engine-url", help="where the engine listens (llama.cpp, vllm, sglang)")
    api.add_argument("--served-model-name", nargs="+", default=[], metavar="NAME",
                     help="the model names requests may give (default: the model folder)")
    api.add_argument("--workers", type=int, default=2, help="tokenizer worker processes (default: 2)")
    api.add_argument("--max-model-len", type=int, help="context length (default: the engine's)")
    api.add_argument("--max-request-bytes", type=int, default=32 << 20, help="largest request body in bytes")
    api.add_argument("--max-concurrent-requests", type=int, default=4096,
                     help="requests served at once; more get 429")
    api.add_argument("--max-buffer-bytes", type=int, default=4 << 20,
                     help="bytes a streamed response may fall behind its client before it is cut")
    api.add_argument("--direct-streaming", action=argparse.BooleanOptionalAction, default=None,
                     help="local workers write streamed responses (every choice) to the client themselves, so the "
                          "API process only moves ids (the default where the workers are on this host; "
                          "--no-direct-streaming forwards every response through the API process)")
    api.add_argument("--max-queued-bytes", type=int, default=64 << 20,
                     help="request bytes that may wait for the pool to take their prompts; more get 429")
    api.add_argument("--derender-state-bytes", type=int, default=64 << 20,
                     help="bytes of streamed derender sequences kept in the workers (vLLM's render tier routes); "
                          "past it the least recently used is closed")
    api.add_argument("--derender-max-streams", type=int, default=1024,
                     help="streamed derender sequences kept at once, all clients together (at most half the pool's "
                          "streams: the generation routes keep the rest); past it the least recently used of the "
                          "client holding the most is closed")
    api.add_argument("--derender-idle-s", type=float, default=300.0,
                     help="seconds a streamed derender sequence may wait for its next chunk before it is closed")
    _add_limit_flags(api)
    api.add_argument("--replay-step-interval", type=float, default=0.01,
                     help="seconds per step of the replay engine (default: 0.01)")
    api.add_argument("--api-key", action="extend", nargs="+", metavar="KEY",
                     help="require one of these keys (repeatable), as `Authorization: Bearer KEY` or `x-api-key: KEY`, "
                          "on every route but /health; without it VLLM_API_KEY and TOKWORKER_API_KEY are read")
    api.add_argument("--metrics-open", action="store_true", help="serve /metrics without an API key")
    api.add_argument("--allowed-origins", type=_json_list, default=["*"], metavar="JSON",
                     help='CORS: origins allowed, a JSON list (default: ["*"])')
    api.add_argument("--allowed-methods", type=_json_list, default=["*"], metavar="JSON",
                     help='CORS: methods allowed, a JSON list (default: ["*"])')
    api.add_argument("--allowed-headers", type=_json_list, default=["*"], metavar="JSON",
                     help='CORS: request headers allowed, a JSON list (default: ["*"])')
    api.add_argument("--allow-credentials", action="store_true", help="CORS: allow credentials (cookies)")
    api.add_argument("--health-interval", type=float, default=1.0, metavar="SECONDS",
                     help="seconds between two checks of the engine's health; /health answers 503 while it fails "
                          "(default: 1)")
    api.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    api.add_argument("--enable-auto-tool-choice", action="store_true",
                     help="accepted for vLLM's command lines: tool calls are parsed whenever a request has tools")
    _add_worker_settings(api)
    from tokworker.api.workers_at import add_workers_at_flags
    add_workers_at_flags(api)             # last: it refuses the flags above that only a pool of its own reads

    demo = commands.add_parser("demo", help="the front door on the replay engine, read with the openai SDK")
    demo.add_argument("--model-dir", help="another tokenizer folder (default: the bundled one)")
    demo.add_argument("--chat-template", help="a template file, its text, or chatml, in place of the model's")
    return parser


def _serve(args: argparse.Namespace) -> int:
    from tokworker.worker.daemon import serve
    from tokworker.worker.options import settings

    return serve(args.model_dir, workers=args.workers, bind=args.bind, curve_keys=args.curve_keys,
                 log_level=args.log_level, **{field: getattr(args, field) for field, *_ in settings()})


def _status(args: argparse.Namespace) -> int:
    import json

    import uvloop

    from tokworker.protocol.endpoints import default_bind
    from tokworker.status import collect, healthy, prometheus, table

    try:
        workers = uvloop.run(collect(args.endpoint or default_bind(), args.curve_keys, args.timeout))
    except ValueError as exc:
        print(f"tokworker status: {exc}", file=sys.stderr)
        return 2
    if args.prometheus:
        sys.stdout.write(prometheus(workers))
    elif args.json:
        for worker in workers:
            print(json.dumps(worker))
    else:
        print(table(workers))
    return 0 if healthy(workers) else 1


def _add_limit_flags(api: argparse.ArgumentParser) -> None:
    """The server's and the HTTP engines' bounds: ServerLimits (tokworker/api/limits.py), ApiOptions and
    EngineLimits (tokworker/engines/http.py) declare them; their defaults are repeated here so that building
    the parser imports no aiohttp (tests/test_api_limits.py checks they agree)."""
    api.add_argument("--max-body-bytes-in-flight", type=int, default=256 << 20,
                     help="bytes of request bodies being received, all clients together; past it 429 "
                          "(default: 256 MiB)")
    api.add_argument("--body-timeout-s", type=float, default=60.0,
                     help="seconds a request body may take to arrive; past it 408 (default: 60)")
    api.add_argument("--header-timeout-s", type=float, default=10.0,
                     help="seconds a request's head may take to arrive; past it 408 and the connection closes "
                          "(default: 10)")
    api.add_argument("--keepalive-timeout-s", type=float, default=75.0,
                     help="seconds an idle connection is kept (default: 75)")
    api.add_argument("--max-connections", type=int, default=None,
                     help="client connections open at once (default: RLIMIT_NOFILE less the descriptors the pool, "
                          "the engine and files need); past it the oldest idle one is closed, else 503")
    api.add_argument("--engine-connect-timeout-s", type=float, default=10.0,
                     help="seconds to connect to an HTTP engine (default: 10)")
    api.add_argument("--engine-header-timeout-s", type=float, default=60.0,
                     help="seconds an HTTP engine may take to send its response headers; past it 504 (default: 60)")
    api.add_argument("--engine-read-timeout-s", type=float, default=300.0,
                     help="seconds an HTTP engine may send nothing within a streamed response; past it the request "
                          "ends with an error (default: 300)")
    api.add_argument("--engine-error-bytes", type=int, default=64 << 10,
                     help="bytes read of an HTTP engine's error body (default: 64 KiB)")
    api.add_argument("--engine-max-connections", type=int, default=256,
                     help="connections to an HTTP engine at once (default: 256)")


def _api(args: argparse.Namespace) -> int:
    import logging

    import uvloop

    from tokworker.api.access import api_keys
    from tokworker.api.limits import ServerLimits
    from tokworker.api.run import engine_for, serve_http
    from tokworker.api.workers_at import workers_at_from
    from tokworker.api.server import ApiOptions
    from tokworker.engines.http import EngineLimits
    from tokworker.worker.options import DEFAULT_MODEL_DIR, settings

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        engine = engine_for(args.engine, args.engine_url, replay_step_interval=args.replay_step_interval,
                            max_model_len=args.max_model_len, limits=EngineLimits(
                                connect_timeout=args.engine_connect_timeout_s,
                                header_timeout=args.engine_header_timeout_s, read_timeout=args.engine_read_timeout_s,
                                error_bytes=args.engine_error_bytes, max_connections=args.engine_max_connections))
        workers_at = workers_at_from(args)
        keys = api_keys(args.api_key)
    except ValueError as exc:
        print(f"tokworker api: {exc}", file=sys.stderr)
        return 2
    spawn = {field: getattr(args, field) for field, *_ in settings()}
    spawn.update(model_dir=args.model_dir, workers=args.workers, log_level=args.log_level)
    options = ApiOptions(served_model_name=args.served_model_name, max_model_len=args.max_model_len,
                         max_request_bytes=args.max_request_bytes, max_concurrent_requests=args.max_concurrent_requests,
                         max_buffer_bytes=args.max_buffer_bytes, max_queued_bytes=args.max_queued_bytes,
                         direct_streaming=args.direct_streaming is not False, drain_timeout=args.drain_timeout_s,
                         derender_state_bytes=args.derender_state_bytes, derender_idle_s=args.derender_idle_s,
                         derender_max_streams=args.derender_max_streams, api_key=keys,
                         metrics_open=args.metrics_open, allowed_origins=args.allowed_origins,
                         allowed_methods=args.allowed_methods, allowed_headers=args.allowed_headers,
                         allow_credentials=args.allow_credentials, health_interval=args.health_interval,
                         max_body_bytes_in_flight=args.max_body_bytes_in_flight, body_timeout=args.body_timeout_s)
    limits = ServerLimits(header_timeout=args.header_timeout_s, keepalive_timeout=args.keepalive_timeout_s,
                          max_connections=args.max_connections)
    try:
        uvloop.run(serve_http(workers_at or spawn, options, engine, host=args.host, port=args.port,
                              model_root=args.model_dir or ("" if workers_at else str(DEFAULT_MODEL_DIR)),
                              limits=limits))
    except ValueError as exc:              # a limit that cannot hold (--max-connections past RLIMIT_NOFILE)
        from tokworker.protocol.messages import CodedError
        if isinstance(exc, CodedError):    # the model cannot be served: main's one line, exit 1
            raise
        print(f"tokworker api: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run a command; a typed error that stops it (the model cannot be served, workers cannot start) is one
    line on stderr and exit status 1, with its traceback only at --log-level DEBUG."""
    from tokworker.protocol.messages import CodedError

    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except CodedError as exc:
        if getattr(args, "log_level", "") == "DEBUG":
            import traceback
            traceback.print_exc()
        print(f"tokworker {args.command}: {exc.message or exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return _serve(args)
    if args.command == "api":
        return _api(args)
    if args.command == "status":
        return _status(args)
    if args.command == "keys":
        from tokworker.worker.security import generate_keys
        directory = generate_keys(args.directory, args.client or ["client"])
        print(f"keys in {directory}: give the daemon --curve-keys {directory}; give each client server.key and "
              "its own <name>.key_secret")
        return 0
    from tokworker.demo import main as demo
    return demo(args.model_dir, args.chat_template)


if __name__ == "__main__":
    sys.exit(main())

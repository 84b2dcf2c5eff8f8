"""The `tokworker` command: `serve` (the daemon), `api` (the HTTP front door), `status` (a running daemon's
health and counters), `keys` (CurveZMQ key pairs), `demo` (one chat turn). The settings' flags are made from
their declarations: WorkerOptions' (worker/options.py) for `serve` and `api`; ApiOptions', ServerLimits'
(api/options.py) and EngineLimits' (engines/options.py) for `api`."""

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
    """The flags a pool's workers take (`serve`'s and `api`'s): the log level, vLLM's tool-choice switch, and one
    flag per WorkerOptions setting, made from its field (type, default, description, bounds are checked by
    validate_options), skipping any flag that the parser defines itself."""
    from tokworker.worker.options import LOG_LEVELS, settings

    serve.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    serve.add_argument("--enable-auto-tool-choice", action="store_true",
                       help="accepted for vLLM's command lines: tool calls are parsed whenever a request has tools")
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
    api.add_argument("--workers", type=int, default=2, help="tokenizer worker processes (default: 2)")
    api.add_argument("--replay-step-interval", type=float, default=0.01, metavar="SECONDS",
                     help="seconds per step of the replay engine (default: 0.01)")
    _add_worker_settings(api)
    for struct, prefix, title, description in _api_settings():
        _add_declared_flags(api.add_argument_group(title, description), struct, prefix)
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


def _api_settings() -> tuple[tuple[type, str, str, str], ...]:
    """`tokworker api`'s declared settings: (the Struct, the prefix of its flags' names, the group of --help)."""
    from tokworker.api.options import ApiOptions, ServerLimits
    from tokworker.engines.options import EngineLimits

    return ((ApiOptions, "", "front door", "the routes' bounds, API keys and CORS (tokworker/api/options.py)"),
            (ServerLimits, "", "connections", "the HTTP server's bounds on its clients' connections"),
            (EngineLimits, "engine_", "HTTP engine", "bounds on an engine reached over HTTP (llama.cpp, vllm, "
                                                     "sglang: tokworker/engines/options.py)"))


def _declared(struct: type) -> list[tuple[str, type, object, str, dict]]:
    """The described fields of an options Struct, (field, type, default, description, extra): the type is
    bool, int, float, str or list (of strings); an optional field's is its other type's (None: not given)."""
    import msgspec

    inspect = msgspec.inspect
    kinds = ((inspect.BoolType, bool), (inspect.IntType, int), (inspect.FloatType, float), (inspect.StrType, str),
             (inspect.ListType, list))
    out = []
    for field in inspect.type_info(struct).fields:
        meta = field.type
        if not isinstance(meta, inspect.Metadata) or "description" not in (meta.extra_json_schema or {}):
            continue
        kind = meta.type
        if isinstance(kind, inspect.UnionType):
            kind = next(member for member in kind.types if not isinstance(member, inspect.NoneType))
        python = next(python for info, python in kinds if isinstance(kind, info))
        default = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
        out.append((field.name, python, default, meta.extra_json_schema["description"], meta.extra or {}))
    return out


def _shown(field: str, default) -> str:
    """A default as --help shows it: bytes in KiB, MiB or GiB when whole, seconds without a needless ".0",
    a list as JSON.

    >>> _shown("max_request_bytes", 32 << 20), _shown("body_timeout_s", 60.0), _shown("allowed_origins", ["*"])
    ('32 MiB', '60', '["*"]')
    """
    import json

    if isinstance(default, list):
        return json.dumps(default)
    if isinstance(default, float):
        return f"{default:g}"
    if "bytes" in field.split("_") and default:
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if default % (1 << shift) == 0:
                return f"{default >> shift} {unit}"
    return str(default)


def _add_declared_flags(group, struct: type, prefix: str) -> None:
    """One flag per described field of `struct`: `--` + prefix + the field's name in dashes (dest: prefix +
    field), its type and default, its description as help with the default (unless the description says it).
    A bool that is off by default is a switch; one that is on is --x/--no-x, None when neither is given (so
    that a check can tell a given flag). A list is read as its declaration's `syntax` says."""
    for field, kind, default, description, extra in _declared(struct):
        dest = prefix + field
        flag = "--" + dest.replace("_", "-")
        if not (default is None or default is False or default == [] or "default" in description):
            description += f" (default: {_shown(field, default)})"
        description = description.replace("%", "%%")
        if kind is bool:
            action = argparse.BooleanOptionalAction if default else "store_true"
            group.add_argument(flag, dest=dest, action=action, default=None if default else False, help=description)
            continue
        metavar = extra.get("metavar") or ("SECONDS" if field.endswith("_s") else "BYTES" if "bytes" in field.split("_")
                                           else "N" if kind is int else None)
        if kind is list:
            syntax = {"words": dict(nargs="+"), "repeatable": dict(action="extend", nargs="+"),
                      "json": dict(type=_json_list)}[extra["syntax"]]
            group.add_argument(flag, dest=dest, default=default, metavar=metavar, help=description, **syntax)
        else:
            group.add_argument(flag, dest=dest, type=kind, default=default, metavar=metavar, help=description)


def _given(args: argparse.Namespace, struct: type, prefix: str) -> dict:
    """`struct`'s declared settings as parsed (those left at None get the Struct's own default)."""
    return {field: value for field, *_ in _declared(struct) if (value := getattr(args, prefix + field)) is not None}


def _api(args: argparse.Namespace) -> int:
    import logging

    import uvloop

    from tokworker.api.access import api_keys
    from tokworker.api.options import ApiOptions, ServerLimits
    from tokworker.api.run import engine_for, serve_http
    from tokworker.api.workers_at import workers_at_from
    from tokworker.engines.options import EngineLimits
    from tokworker.worker.options import DEFAULT_MODEL_DIR, settings

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = {struct: _given(args, struct, prefix) for struct, prefix, *_ in _api_settings()}
    try:
        engine = engine_for(args.engine, args.engine_url, replay_step_interval=args.replay_step_interval,
                            max_model_len=args.max_model_len, limits=EngineLimits(**given[EngineLimits]))
        workers_at = workers_at_from(args)
        keys = api_keys(args.api_key)
    except ValueError as exc:
        print(f"tokworker api: {exc}", file=sys.stderr)
        return 2
    spawn = {field: getattr(args, field) for field, *_ in settings()}
    spawn.update(model_dir=args.model_dir, workers=args.workers, log_level=args.log_level)
    options = ApiOptions(**{**given[ApiOptions], "api_key": keys, "drain_timeout": args.drain_timeout_s})
    limits = ServerLimits(**given[ServerLimits])
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

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

    demo = commands.add_parser("demo", help="one chat turn through a local pool on the bundled tokenizer")
    demo.add_argument("--model-dir", help="another tokenizer folder (default: the bundled one)")
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "status":
        return _status(args)
    if args.command == "keys":
        from tokworker.worker.security import generate_keys
        directory = generate_keys(args.directory, args.client or ["client"])
        print(f"keys in {directory}: give the daemon --curve-keys {directory}; give each client server.key and "
              "its own <name>.key_secret")
        return 0
    from tokworker.demo import main as demo
    return demo(args.model_dir)


if __name__ == "__main__":
    sys.exit(main())

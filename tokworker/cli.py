"""The `tokworker` command: `serve` (the daemon), `keys` (CurveZMQ key pairs), `demo` (one chat turn)."""

from __future__ import annotations

import argparse
import sys


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokworker", description="The text boundary of LLM serving, in a pool of "
                                                                   "worker processes.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the worker daemon until SIGTERM")
    serve.add_argument("--model-dir", required=True, help="a folder with tokenizer.json (and tokenizer_config.json)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (worker i listens on base + i)")
    serve.add_argument("--bind", help="ipc:///abs/path (in a 0700 directory) or tcp://host:port (needs "
                                      "--curve-keys); default: ipc:// under $XDG_RUNTIME_DIR")
    serve.add_argument("--curve-keys", help="key directory from `tokworker keys DIR`")
    serve.add_argument("--tool-call-parser", help="default tool-call parser for streams that name none (vLLM names)")
    serve.add_argument("--reasoning-parser", help="default reasoning parser for streams that name none")
    serve.add_argument("--chat-template", metavar="FILE",
                       help='the chat template to render with instead of the model\'s own (or "chatml")')
    serve.add_argument("--allow-request-templates", action="store_true",
                       help="run chat templates sent in requests (untrusted code in a bounded sandbox)")
    serve.add_argument("--memory-limit-mb", type=int, default=4096, help="RLIMIT_AS per worker (0: none)")
    serve.add_argument("--max-constraints", type=_positive, default=256,
                       help="compiled constraints kept per worker (least recently used go first)")
    serve.add_argument("--max-constraint-states", type=_positive, default=1024,
                       help="their compiled states per worker, all together (one can hold ~0.75 MB on a 150k "
                            "vocabulary)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    keys = commands.add_parser("keys", help="make CurveZMQ keys: the server pair and client pairs")
    keys.add_argument("directory")
    keys.add_argument("--client", action="append", help="client name (repeatable; default: client)")

    demo = commands.add_parser("demo", help="one chat turn through a local pool on the bundled tokenizer")
    demo.add_argument("--model-dir", help="another tokenizer folder (default: the bundled one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        from tokworker.worker.daemon import serve
        return serve(args.model_dir, workers=args.workers, bind=args.bind, curve_keys=args.curve_keys,
                     log_level=args.log_level, chat_template=args.chat_template, tool_parser=args.tool_call_parser,
                     reasoning_parser=args.reasoning_parser, allow_request_templates=args.allow_request_templates,
                     memory_limit_mb=args.memory_limit_mb, max_constraints=args.max_constraints,
                     max_constraint_states=args.max_constraint_states)
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

"""`tokworker serve`: the standalone daemon. N worker processes on N endpoints (worker i at base + i), kept
alive by the launcher, until SIGTERM or SIGINT stops them all cleanly.

API processes on other hosts connect with `TokenizerPool.connect("tcp://host:port", curve_keys=DIR)`;
the first worker's handshake tells them how many workers there are.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
from pathlib import Path

from tokworker.templates.chatml import CHATML_NAME
from tokworker.worker.options import WorkerOptions
from tokworker.protocol.endpoints import InsecureEndpoint, worker_endpoints
from tokworker.worker.security import check_bind

log = logging.getLogger("tokworker.daemon")


def default_bind() -> str:
    """ipc:// in a per-user 0700 directory under $XDG_RUNTIME_DIR (or the temp directory)."""
    root = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return f"ipc://{Path(root) / f'tokworker-{os.getuid()}' / 'worker'}"


def serve(model_dir: str, workers: int = 1, bind: str | None = None, curve_keys: str | None = None,
          log_level: str = "INFO", chat_template: str | None = None, **worker_options) -> int:
    """Run the daemon in the foreground; returns the process exit status."""
    from tokworker.worker.launcher import Launcher

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s")
    bind = bind or default_bind()
    if workers < 1:
        log.error("--workers must be at least 1")
        return 2
    path = Path(model_dir)
    if not (path.is_file() or (path / "tokenizer.json").exists() or any(path.glob("*.tiktoken"))):
        log.error("%s holds no tokenizer.json (or tokenizer file)", model_dir)
        return 2
    if chat_template is not None and chat_template != CHATML_NAME:
        if not Path(chat_template).is_file():
            log.error("--chat-template %s is not a file (give a template file, or \"%s\")", chat_template, CHATML_NAME)
            return 2
        chat_template = str(Path(chat_template).resolve())      # workers may start in another directory
    try:
        endpoints = worker_endpoints(bind, workers)
        for endpoint in endpoints:
            check_bind(endpoint, curve_keys)
    except (InsecureEndpoint, ValueError) as exc:
        log.error("%s", exc)
        return 2
    options = [WorkerOptions(model_dir=str(path.resolve()), bind=endpoint, index=i, pool_size=workers,
                             curve_keys=str(Path(curve_keys).resolve()) if curve_keys else None, log_level=log_level,
                             chat_template=chat_template, **worker_options)
               for i, endpoint in enumerate(endpoints)]
    stop = threading.Event()

    def request_stop(signum, frame):
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    launcher = Launcher(options).start()
    log.info("serving %s with %d worker(s): %s%s", model_dir, workers, ", ".join(endpoints),
             " (CurveZMQ)" if curve_keys else "")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        launcher.stop()
    log.info("stopped cleanly (%d worker restart(s) while running)", launcher.restarts)
    return 0

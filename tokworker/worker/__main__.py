"""`python -m tokworker.worker '<WorkerOptions JSON>'`: one worker process (what the launcher runs)."""

import sys
import traceback

from tokworker.worker.options import options_from_json
from tokworker.worker.server import run_worker

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tokworker.worker '<WorkerOptions as JSON>'")
    options = options_from_json(sys.argv[1])
    try:
        status = run_worker(options)
    except Exception as exc:
        if options.log_level.upper() == "DEBUG":
            traceback.print_exc()
        # one line, the last, which the launcher quotes when a worker cannot start
        sys.exit(f"tokworker worker cannot run: {type(exc).__name__}: {' '.join(str(exc).split())}")
    sys.exit(status)

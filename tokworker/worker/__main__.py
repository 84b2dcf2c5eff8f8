"""`python -m tokworker.worker '<WorkerOptions JSON>'`: one worker process (what the launcher runs)."""

import sys

from tokworker.worker.options import options_from_json
from tokworker.worker.server import run_worker

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tokworker.worker '<WorkerOptions as JSON>'")
    sys.exit(run_worker(options_from_json(sys.argv[1])))

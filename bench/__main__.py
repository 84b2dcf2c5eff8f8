"""`python -m bench [--quick] [--model-dir DIR ...] [--only NAME ...] [--out DIR] [--vllm-python PATH]`

Runs every benchmark section (each a module here with `run(quick, model_dirs) -> list[dict]`), then writes
what they measured as JSON lines, a markdown table and, if matplotlib is installed, a PNG of the ratios.
Needs `pip install -e '.[bench]'` (the references), not the test extras. With `--vllm-python`, a vLLM
install's python, the `beside_vllm` section measures vLLM's API-process path beside ours (bench/README.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from bench.report import write_markdown, write_plot

SECTIONS = ["encode", "chat", "cold_prompt", "stream", "writers", "pool", "constrain", "front_door", "first_byte_api",
            "llama_cpp", "gguf_load", "render_tier", "http_engines", "vllm_served", "vllm_first_text"]
# the sections --vllm-python's install measures
WITH_VLLM = ("beside_vllm", "render_tier", "http_engines", "vllm_served", "vllm_first_text")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs and few repeats (about a minute)")
    parser.add_argument("--model-dir", action="append", default=[], help="a Hugging Face model folder to add")
    parser.add_argument("--only", action="append", choices=SECTIONS + ["beside_vllm"], help="run only these sections")
    parser.add_argument("--out", default="bench/out", help="where results.jsonl, results.md and results.png go")
    parser.add_argument("--vllm-python", help="a python with vLLM installed: adds the `beside_vllm` section and "
                                                "the vLLM rows of render_tier, http_engines, vllm_served and "
                                                "vllm_first_text")
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "quick": args.quick, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(json.dumps({"machine": machine}), flush=True)
    results: dict[str, list[dict]] = {}
    names = args.only or SECTIONS
    if args.vllm_python and "beside_vllm" not in names and (not args.only or "front_door" in names):
        names = names + ["beside_vllm"]       # its vLLM figure is joined into the front door's rows
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        started = time.perf_counter()
        extra = {"python": args.vllm_python} if name in WITH_VLLM else {}
        rows = module.run(quick=args.quick, model_dirs=[Path(d) for d in args.model_dir], **extra)
        for row in rows:
            print(json.dumps({"section": name, **row}, ensure_ascii=False), flush=True)
        results[name] = rows
        print(json.dumps({"section": name, "seconds": round(time.perf_counter() - started, 1)}), file=sys.stderr)

    _join_vllm(results)
    with open(out / "results.jsonl", "w") as f:
        f.write(json.dumps({"machine": machine}) + "\n")
        for name, rows in results.items():
            for row in rows:
                f.write(json.dumps({"section": name, **row}, ensure_ascii=False) + "\n")
    write_markdown(out / "results.md", machine, results, command=" ".join(["python -m bench", *(argv or sys.argv[1:])]))
    write_plot(out / "results.png", results)


def _join_vllm(results: dict[str, list[dict]]) -> None:
    """The front door's per-token CPU beside vLLM's path measured in the same run: its stop strings with chat
    chunks, everything its API process does per token but the HTTP write."""
    vllm = next((row["vllm_us_per_token"] for row in results.get("beside_vllm", ())
                 if row.get("case") == "stop strings + chat chunks" and "vllm_us_per_token" in row), None)
    for row in results.get("front_door", ()) if vllm is not None else ():
        if row.get("case") == "streams":
            row["vllm_us_per_token"] = vllm
            row["vllm_ratio"] = round(vllm / row["api_us_per_token"], 2)
            row["vllm_ratio_direct"] = round(vllm / row["direct_api_us_per_token"], 2)


if __name__ == "__main__":
    main()

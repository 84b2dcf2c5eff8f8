"""The files beside tokenizer.json in a Hugging Face model folder, read the way transformers reads them.

tokenizer_config.json (bos/eos/pad/unk, added_tokens_decoder, chat_template),
special_tokens_map.json (fallback for the special token names), chat_template.jinja / chat_template.json
(which take precedence over the config's template) and generation_config.json (eos ids, often a list).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

_SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


def token_content(value) -> str | None:
    """A special token entry is a string or an AddedToken dict with "content"."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def _ids(value) -> list[int]:
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _chat_template(value):
    """A string, or name -> template for the list form [{"name": ..., "template": ...}]."""
    if isinstance(value, list):
        named = {entry["name"]: entry["template"] for entry in value
                 if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str)}
        return named or None
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if isinstance(v, str)} or None
    return value if isinstance(value, str) else None


@dataclass
class TokenizerConfig:
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    unk_token: str | None = None
    chat_template: str | dict | None = None
    added_tokens_decoder: dict[int, dict] = field(default_factory=dict)
    generation_eos_ids: list[int] = field(default_factory=list)
    generation_bos_id: int | None = None

    @classmethod
    def from_dict(cls, config: dict | None, generation: dict | None = None) -> "TokenizerConfig":
        config, generation = config or {}, generation or {}
        decoder = {}
        for key, spec in (config.get("added_tokens_decoder") or {}).items():
            try:
                token_id = int(key)
            except (TypeError, ValueError):
                continue
            if isinstance(spec, dict) and isinstance(spec.get("content"), str):
                decoder[token_id] = spec
        bos_ids = _ids(generation.get("bos_token_id"))
        return cls(**{name: token_content(config.get(name)) for name in _SPECIAL_NAMES},
                   chat_template=_chat_template(config.get("chat_template")),
                   added_tokens_decoder=decoder, generation_eos_ids=_ids(generation.get("eos_token_id")),
                   generation_bos_id=bos_ids[0] if bos_ids else None)

    @classmethod
    def from_dir(cls, directory: str | Path) -> "TokenizerConfig":
        directory = Path(directory)
        config = _read_json(directory / "tokenizer_config.json")
        special_map = _read_json(directory / "special_tokens_map.json")
        for name in _SPECIAL_NAMES:
            if token_content(config.get(name)) is None and token_content(special_map.get(name)) is not None:
                config[name] = special_map[name]
        template_json = _read_json(directory / "chat_template.json")
        if "chat_template" in template_json:
            config["chat_template"] = template_json["chat_template"]
        jinja = directory / "chat_template.jinja"
        if jinja.is_file():
            config["chat_template"] = jinja.read_text(encoding="utf-8")
        return cls.from_dict(config, _read_json(directory / "generation_config.json"))

"""tokenizer.json's bytes -> the spec dict Tokenizer.from_spec reads, decoded once with msgspec, the model's
largest tables left encoded for the model to decode only when its disk cache cannot answer."""

from __future__ import annotations

from typing import Any

import msgspec

from .json_numbers import serde_f64


class _FileLayout(msgspec.Struct):
    """The parts of tokenizer.json a Tokenizer reads, with the model's values left encoded for one more pass."""
    model: dict[str, msgspec.Raw] = msgspec.UNSET
    version: Any = msgspec.UNSET
    added_tokens: Any = msgspec.UNSET
    normalizer: Any = msgspec.UNSET
    pre_tokenizer: Any = msgspec.UNSET
    post_processor: Any = msgspec.UNSET
    decoder: Any = msgspec.UNSET


_DECODER = msgspec.json.Decoder(float_hook=serde_f64)          # floats exactly as tokenizers reads them
_LAYOUT_DECODER = msgspec.json.Decoder(type=_FileLayout, float_hook=serde_f64)


def read_spec(data: bytes) -> dict:
    """tokenizer.json decoded with msgspec (a third faster than json), except the model's "merges" (and a
    Unigram's "vocab"), left encoded (msgspec.Raw) for the model to decode only if its tables are not in the
    disk cache. Floats (Unigram scores) are read with serde_json's rounding, as `tokenizers` reads them
    (json_numbers)."""
    try:
        layout = _LAYOUT_DECODER.decode(data)
    except msgspec.ValidationError:              # valid JSON of another shape: from_spec says what is wrong
        return _DECODER.decode(data)
    spec = {field: value for field in _FileLayout.__struct_fields__
            if (value := getattr(layout, field)) is not msgspec.UNSET}
    if "model" in spec:
        model = spec["model"]
        kind = _DECODER.decode(model["type"]) if "type" in model else None
        # left encoded: BPE's merges and Unigram's scored vocabulary, which the model decodes only when its
        # tables are not in the disk cache (Unigram's floats need serde_json's rounding, a Python call each)
        raw = {"merges"} | ({"vocab"} if kind == "Unigram" else set())
        spec["model"] = {key: value if key in raw else _DECODER.decode(value) for key, value in model.items()}
    return spec

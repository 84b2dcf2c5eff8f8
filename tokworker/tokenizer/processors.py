"""Post-processors: the special tokens `encode(..., add_special_tokens=True)` wraps a single sequence in.

Only ids matter here (offsets, type ids and pairs are not part of this package's surface). ByteLevel's
post-processor only trims offsets, so it adds nothing.
"""

from __future__ import annotations

from .errors import UnsupportedComponent


class TemplateProcessing:
    """The "single" template: "$A" is the sequence, any other piece is a special token's ids."""

    def __init__(self, single: list, special_tokens: dict):
        self.parts: list[list[int] | None] = []      # None stands for the sequence
        for item in single:
            if "Sequence" in item:
                if item["Sequence"].get("id", "A") != "A":
                    raise UnsupportedComponent("TemplateProcessing single piece", item["Sequence"].get("id"))
                self.parts.append(None)
            elif "SpecialToken" in item:
                name = item["SpecialToken"]["id"]
                if name not in special_tokens:
                    raise ValueError(f"TemplateProcessing uses special token {name!r} it does not define")
                self.parts.append(list(special_tokens[name]["ids"]))
            else:
                raise UnsupportedComponent("TemplateProcessing piece", next(iter(item), None))

    @classmethod
    def from_spec(cls, spec: dict) -> "TemplateProcessing":
        single = spec.get("single") or []
        if isinstance(single, str):
            raise UnsupportedComponent("TemplateProcessing", "string template", "expected the serialized list form")
        return cls(single, spec.get("special_tokens") or {})

    def process(self, ids: list[int]) -> list[int]:
        out: list[int] = []
        for part in self.parts:
            out.extend(ids if part is None else part)
        return out


class Wrap:
    """BertProcessing / RobertaProcessing for one sequence: [cls] ids [sep]."""

    def __init__(self, cls_id: int, sep_id: int):
        self.cls_id, self.sep_id = cls_id, sep_id

    @classmethod
    def from_spec(cls, spec: dict) -> "Wrap":
        return cls(int(spec["cls"][1]), int(spec["sep"][1]))

    def process(self, ids: list[int]) -> list[int]:
        return [self.cls_id, *ids, self.sep_id]


class NoSpecialTokens:
    """ByteLevel's post-processor: offsets only."""

    def process(self, ids: list[int]) -> list[int]:
        return ids


class Sequence:
    def __init__(self, stages: list):
        self.stages = stages

    def process(self, ids: list[int]) -> list[int]:
        for stage in self.stages:
            ids = stage.process(ids)
        return ids


def from_spec(spec: dict | None):
    """The post-processor a tokenizer.json "post_processor" object describes (None when absent)."""
    if not spec:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return Sequence([stage for stage in map(from_spec, spec.get("processors", [])) if stage is not None])
    if kind == "TemplateProcessing":
        return TemplateProcessing.from_spec(spec)
    if kind in ("BertProcessing", "RobertaProcessing"):
        return Wrap.from_spec(spec)
    if kind == "ByteLevel":
        return NoSpecialTokens()
    raise UnsupportedComponent("post_processor", kind)

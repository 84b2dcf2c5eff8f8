"""The tokenizer's typed errors (ValueError subclasses, so callers that catch ValueError keep working)."""

from __future__ import annotations


class UnsupportedComponent(ValueError):
    """A tokenizer.json component this package cannot reproduce exactly: raised at load time, never
    silently replaced by something that would give different ids."""

    def __init__(self, stage: str, kind, detail: str = ""):
        self.stage, self.kind = stage, kind
        message = f"unsupported {stage} type {kind!r}"
        super().__init__(f"{message}: {detail}" if detail else message)


class MalformedVocabulary(ValueError):
    """A vocabulary file that is not the layout its loader reads: the message names the file and the part."""

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{path} {problem}")

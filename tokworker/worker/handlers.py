"""The stateless requests a worker serves: render, encode, decode (constraints are in constraints.py). Each
takes a decoded message and returns its reply Struct, or raises: a CodedError with the code the client
should see, or the engine's own error, which the server's one mapping (server.error_of) turns into a code."""

from __future__ import annotations

import msgspec

from tokworker.protocol.messages import (CodedError, Decode, DecodeReply, Encode, EncodeReply, EncodeRun, ErrorCode,
                                         Render, RenderReply, nesting_depth)
from tokworker.protocol.packed_ids import PACKS_IDS, packed_ids
from tokworker.worker.options import WorkerOptions

# A prompt shorter than this is encoded where it is rendered: below it, cutting it and the trips to the other
# workers cost about what they save
SPLIT_CHARS = 32_768
MAX_PARTS = 64
decode_run = msgspec.msgpack.Decoder(list[int | str | tuple[str, bool]]).decode
encode_run = msgspec.msgpack.Encoder().encode


class Handlers:
    def __init__(self, tokenizer, options: WorkerOptions):
        self.tokenizer = tokenizer
        self.options = options

    # ------------------------------------------------------------ render
    def render(self, msg: Render) -> RenderReply:
        self._check_nesting(msg.messages, "messages")
        self._check_nesting(msg.tools, "tools")
        self._check_nesting(msg.documents, "documents")
        self._check_nesting(msg.template_kwargs, "template_kwargs")
        from tokworker.templates.apply import render_chat_prompt

        reserved = {"messages", "tools", "tokenizer", "tokenize", "chat_template", "add_generation_prompt",
                    "continue_final_message", "allow_untrusted_template", "sanitize_control_tokens", "limits", "now",
                    "documents", "openai_messages"}
        clash = reserved.intersection(msg.template_kwargs)
        if clash:
            raise CodedError(ErrorCode.INVALID, f"template_kwargs may not set {sorted(clash)}")
        options = dict(msg.template_kwargs, tools=msg.tools, documents=msg.documents,
                       chat_template=msg.chat_template, add_generation_prompt=msg.add_generation_prompt,
                       continue_final_message=msg.continue_final_message,
                       allow_untrusted_template=self.options.allow_request_templates,
                       openai_messages=True)      # requests carry OpenAI-shaped messages: normalized as vLLM does
        if not 1 <= msg.parts <= MAX_PARTS:
            raise CodedError(ErrorCode.INVALID, f"parts is 1 to {MAX_PARTS}, not {msg.parts}")
        runs: list = []
        text, ids = render_chat_prompt(self.tokenizer, msg.messages, encode=self._encoder(msg.parts, runs), **options)
        if msg.packed and PACKS_IDS and not any(o.chunks is not None and o.chunks.token_ids for o in msg.open):
            ids = packed_ids(ids)       # its streams read it as ids too; none writes them into JSON
        # the streams it opens read the text (where generation starts); the server drops it after
        return RenderReply(ids=ids, text=text if msg.return_text or msg.open else None,
                           runs=[msgspec.Raw(encode_run(run)) for run in runs])

    def _encoder(self, parts: int, runs: list):
        """The render's encode: a long prompt cut into `parts` runs, the first encoded here and the others
        put in `runs` for the client to have encoded on other workers."""
        tokenizer = self.tokenizer

        def encode(text: str, spans) -> list[int]:
            if parts < 2 or len(text) < SPLIT_CHARS:
                return tokenizer.encode(text) if spans is None else tokenizer.encode_with_literal_spans(text, spans)
            first, *others = tokenizer.encode_parts(text, parts, spans)
            runs.extend(others)
            return tokenizer.encode_run(first)
        return encode

    def encode_run(self, msg: EncodeRun) -> EncodeReply:
        """One run of a prompt another worker cut (RenderReply.runs)."""
        try:
            run = decode_run(msg.run)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise CodedError(ErrorCode.INVALID, f"a run is a list of ids, words and [piece, at_start] pairs: "
                                                f"{error}") from None
        size = self.tokenizer.vocab_size
        if any(type(item) is int and not 0 <= item < size for item in run):
            raise CodedError(ErrorCode.INVALID, f"a run's ids are below the vocabulary's size, {size}")
        return EncodeReply(ids=[self.tokenizer.encode_run(run)])

    # ------------------------------------------------------------ encode / decode
    def encode(self, msg: Encode) -> EncodeReply:
        self._check_batch(len(msg.texts))
        total = sum(map(len, msg.texts))
        if total > self.options.max_text_chars:
            raise CodedError(ErrorCode.TOO_LARGE, f"{total} characters to encode; the limit is "
                                                   f"{self.options.max_text_chars}")
        return EncodeReply(ids=self.tokenizer.encode_batch(msg.texts, add_special_tokens=msg.add_special_tokens,
                                                           split_special_tokens=msg.split_special_tokens))

    def decode(self, msg: Decode) -> DecodeReply:
        self._check_batch(len(msg.ids))
        decode, skip = self.tokenizer.decode, msg.skip_special_tokens
        return DecodeReply(texts=[decode(ids, skip_special_tokens=skip) for ids in msg.ids])

    # ------------------------------------------------------------ limits
    def _check_batch(self, size: int) -> None:
        if size > self.options.max_batch:
            raise CodedError(ErrorCode.TOO_LARGE, f"batch of {size}; the limit is {self.options.max_batch}")

    def _check_nesting(self, value, name: str) -> None:
        if value is not None and nesting_depth(value, self.options.max_depth) > self.options.max_depth:
            raise CodedError(ErrorCode.TOO_LARGE, f"{name} nests deeper than {self.options.max_depth} levels")

"""The stateless requests a worker serves: render, encode, decode, compile. Each takes a decoded message
and returns its reply Struct, or raises WorkerError with the code the client should see."""

from __future__ import annotations

from protocol.messages import (Compile, CompileReply, Decode, DecodeReply, Encode, EncodeReply, ErrorCode, Render,
                               RenderReply, nesting_depth)
from tokworker.worker.options import WorkerOptions
from tokworker.worker.streams import WorkerError


class Handlers:
    def __init__(self, tokenizer, options: WorkerOptions):
        self.tokenizer = tokenizer
        self.options = options
        self._trie = None

    # ------------------------------------------------------------ render
    def render(self, msg: Render) -> RenderReply:
        self._check_nesting(msg.messages, "messages")
        self._check_nesting(msg.tools, "tools")
        self._check_nesting(msg.template_kwargs, "template_kwargs")
        from tokworker.templates import TemplateError, UntrustedTemplateError
        from tokworker.templates.apply import render_chat_prompt

        reserved = {"tools", "tokenize", "chat_template", "add_generation_prompt", "continue_final_message",
                    "allow_untrusted_template", "sanitize_control_tokens", "limits", "now", "documents"}
        clash = reserved.intersection(msg.template_kwargs)
        if clash:
            raise WorkerError(ErrorCode.INVALID, f"template_kwargs may not set {sorted(clash)}")
        options = dict(msg.template_kwargs, tools=msg.tools, chat_template=msg.chat_template,
                       add_generation_prompt=msg.add_generation_prompt,
                       continue_final_message=msg.continue_final_message,
                       allow_untrusted_template=self.options.allow_request_templates)
        try:
            text, ids = render_chat_prompt(self.tokenizer, msg.messages, **options)
        except UntrustedTemplateError as exc:
            raise WorkerError(ErrorCode.FORBIDDEN, f"{exc} (the operator can enable --allow-request-templates)") \
                from None
        except TemplateError as exc:
            raise WorkerError(ErrorCode.TEMPLATE, f"{type(exc).__name__}: {exc}") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise WorkerError(ErrorCode.INVALID, f"cannot render these messages: {exc}") from None
        return RenderReply(ids=list(ids), text=text if msg.return_text else None)

    # ------------------------------------------------------------ encode / decode
    def encode(self, msg: Encode) -> EncodeReply:
        self._check_batch(len(msg.texts))
        total = sum(map(len, msg.texts))
        if total > self.options.max_text_chars:
            raise WorkerError(ErrorCode.TOO_LARGE, f"{total} characters to encode; the limit is "
                                                   f"{self.options.max_text_chars}")
        try:
            ids = self.tokenizer.encode_batch(msg.texts, add_special_tokens=msg.add_special_tokens,
                                              split_special_tokens=msg.split_special_tokens)
        except (ValueError, TypeError) as exc:
            raise WorkerError(ErrorCode.INVALID, str(exc)) from None
        return EncodeReply(ids=ids)

    def decode(self, msg: Decode) -> DecodeReply:
        self._check_batch(len(msg.ids))
        decode, skip = self.tokenizer.decode, msg.skip_special_tokens
        try:
            return DecodeReply(texts=[decode(ids, skip_special_tokens=skip) for ids in msg.ids])
        except (ValueError, TypeError) as exc:
            raise WorkerError(ErrorCode.INVALID, str(exc)) from None

    # ------------------------------------------------------------ constraints
    def compile(self, msg: Compile) -> CompileReply:
        given = [msg.pattern is not None, msg.json_schema is not None, msg.tools is not None]
        if sum(given) != 1:
            raise WorkerError(ErrorCode.INVALID, "give exactly one of pattern, json_schema, tools")
        self._check_nesting(msg.json_schema, "json_schema")
        self._check_nesting(msg.tools, "tools")
        try:
            from tokworker.constrain import TokenAutomaton
            if msg.pattern is not None:
                pattern = msg.pattern
            elif msg.json_schema is not None:
                from tokworker.constrain.json_schema import json_schema_to_regex
                pattern = json_schema_to_regex(msg.json_schema)
            else:
                from tokworker.constrain.tool_choice import tool_call_pattern
                pattern = tool_call_pattern(msg.tools, msg.tool_name, format=msg.format)
        except ImportError as exc:
            raise WorkerError(ErrorCode.UNAVAILABLE, f"constraints are not available: {exc}") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise WorkerError(ErrorCode.INVALID, f"cannot compile this constraint: {exc}") from None
        try:
            automaton = TokenAutomaton(pattern, self.vocab_trie(), eos_ids=self.tokenizer.eos_token_ids)
            return self._tables(pattern, automaton)
        except ValueError as exc:
            raise WorkerError(ErrorCode.INVALID, f"cannot compile this constraint: {exc}") from None

    def prepare_trie(self) -> bool:
        """Build the vocabulary trie if it is not there yet; True when it was just built."""
        if self._trie is not None:
            return False
        self.vocab_trie()
        return True

    def vocab_trie(self):
        """The vocabulary as a byte trie, built once (seconds on a 150k vocabulary): the server builds it
        before the first compile request's time budget starts, so no request pays for it."""
        if self._trie is None:
            from tokworker.constrain import VocabTrie
            self._trie = VocabTrie(self.tokenizer.vocab_bytes())
        return self._trie

    def _tables(self, pattern: str, automaton) -> CompileReply:
        """Number the reachable states from 0 (the start) and list each one's allowed tokens and targets,
        within a transition budget that keeps the reply under the message size limit."""
        budget = self.options.max_message_bytes // 10
        number = {automaton.initial_state: 0}
        order = [automaton.initial_state]
        allowed, next_states, accepting = [], [], []
        eos = set(automaton.eos_ids)
        for state in order:                      # `order` grows while we walk it: breadth-first
            ids = [t for t in automaton.allowed(state) if t not in eos]
            budget -= len(ids)
            if budget < 0:
                raise WorkerError(ErrorCode.TOO_LARGE, "the constraint's token automaton is too large to send")
            targets = []
            for token_id in ids:
                target = automaton.advance(state, token_id)
                if target not in number:
                    number[target] = len(order)
                    order.append(target)
                targets.append(number[target])
            allowed.append(ids)
            next_states.append(targets)
            if automaton.is_accepting(state):
                accepting.append(number[state])
        return CompileReply(pattern=pattern, num_states=len(order), allowed=allowed, next_states=next_states,
                            accepting=accepting)

    # ------------------------------------------------------------ limits
    def _check_batch(self, size: int) -> None:
        if size > self.options.max_batch:
            raise WorkerError(ErrorCode.TOO_LARGE, f"batch of {size}; the limit is {self.options.max_batch}")

    def _check_nesting(self, value, name: str) -> None:
        if value is not None and nesting_depth(value, self.options.max_depth) > self.options.max_depth:
            raise WorkerError(ErrorCode.TOO_LARGE, f"{name} nests deeper than {self.options.max_depth} levels")

"""Constraints for an engine's sampler: compile once per request, then one bitmask per decoding step.

An engine needs, at every step and for every constrained sequence, the set of token ids it may sample. So
the worker does not ship the token automaton (on a 150k vocabulary its tables run to megabytes); it keeps
the automaton and answers per-step queries:

- `compile` resolves the constraint (regex, JSON schema or forced tool call) to a regex, builds its token
  automaton over the vocabulary trie (states are compiled lazily, on first use), caches it under an id
  derived from its content, and returns the id and the start state.
- `guide` takes, per sequence, (constraint id, the state it was in, the ids sampled since) and returns the
  new state, whether it is accepting, and the allowed ids as a bitmask of ceil(vocab/32) little-endian
  32-bit words (bit i of word j = token 32j+i: xgrammar's and llguidance's layout, ready for their
  masking kernels). Masks are computed once per state and kept; a reply carries each distinct mask once
  and the results index it (sequences of a batch often share a state: 19 KB each on Qwen3).

Ids are a digest of the model, pattern, eos ids, control tokens and the DFA itself, so a worker that lost
an automaton (evicted, or restarted) and compiles the same request again gives the same id and the same
state numbers; a client that gets `unknown_constraint` recompiles and asks again.

Bounds, all held while a request runs, not only after it: at most `max_constraints` automata,
`max_constraint_states` compiled states across them, and `max_constraint_mb` of memory for all of it (an
automaton's DFA, each compiled state's tables and mask), priced as each state is compiled; the least
recently used automata go first, and when the one being answered is alone over a bound, its own least
recently used states (compiled again if they are needed again). A request that fails (its budget, a bad
id) leaves nothing it compiled behind: client-chosen states once grew a worker from 148 MB to 3.8 GB. The
vocabulary trie is built once (per set of control tokens: one more for Mistral's [TOOL_CALLS]) on the first
compile, outside that request's time budget.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from itertools import chain

from tokworker.protocol.messages import (CodedError, Compile, CompileReply, Error, ErrorCode, Guide, GuideReply, GuideResult,
                               nesting_depth)
from tokworker.worker.options import WorkerOptions

_BITS = bytes.maketrans(b"\x00\x01", b"01")
MAX_TRIES = 4


class _Entry:
    """A cached automaton, its masks by state, and what each compiled state costs, least recently used first."""

    __slots__ = ("automaton", "masks", "states")

    def __init__(self, automaton):
        self.automaton = automaton
        self.masks: dict[int, bytes] = {}
        self.states: OrderedDict[int, int] = OrderedDict()

    def cost(self) -> int:
        return self.automaton.base_bytes + sum(self.states.values())

    def drop(self, state: int) -> None:
        self.states.pop(state, None)
        self.masks.pop(state, None)
        self.automaton.forget((state,))


class ConstraintCache:
    def __init__(self, tokenizer, options: WorkerOptions, fingerprint: str):
        self.tokenizer = tokenizer
        self.options = options
        self.fingerprint = fingerprint
        self.vocab_size = tokenizer.vocab_size
        self.mask_bytes = (self.vocab_size + 31) // 32 * 4
        self.entries: OrderedDict[str, _Entry] = OrderedDict()     # constraint id -> automaton, LRU first
        self.ids: dict[tuple, str] = {}                             # (pattern, eos, control) -> id
        self.tries: dict[tuple, object] = {}
        self.max_bytes = options.max_constraint_mb << 20
        self._compiled: list[tuple[_Entry, int]] = []               # by the request being answered

    # ------------------------------------------------------------ compile
    def prepare(self, msg: Compile) -> bool:
        """Build the vocabulary trie `msg` needs if it is not there yet; True when one was just built."""
        control = self._control_tokens(msg)
        if control in self.tries:
            return False
        self._trie(control)
        return True

    def compile(self, msg: Compile) -> CompileReply:
        return self._answer(self._compile, msg)

    def guide(self, msg: Guide) -> GuideReply:
        return self._answer(self._guide, msg)

    def _answer(self, handler, msg):
        """handler(msg), with what it compiled forgotten if it fails (a timeout may stop it anywhere)."""
        self._compiled = []
        known = set(self.entries)
        try:
            return handler(msg)
        except BaseException:
            for entry, state in self._compiled:
                entry.drop(state)
            for constraint_id in set(self.entries) - known:
                del self.entries[constraint_id]
            for entry in self.entries.values():       # a compile stopped half way left a table untracked
                entry.automaton.forget(entry.automaton.compiled_states() - set(entry.states))
            self.ids = {key: cid for key, cid in self.ids.items() if cid in self.entries}
            raise
        finally:
            self._compiled = []

    def _compile(self, msg: Compile) -> CompileReply:
        pattern = self._pattern(msg)
        control = self._control_tokens(msg)
        eos = tuple(sorted(set(self.tokenizer.eos_token_ids if msg.eos_token_ids is None else msg.eos_token_ids)))
        key = (pattern, eos, control)
        constraint_id = self.ids.get(key)
        entry = self.entries.get(constraint_id) if constraint_id is not None else None
        if entry is None:
            from tokworker.constrain import TokenAutomaton
            automaton = TokenAutomaton(pattern, self._trie(control), eos_ids=eos)
            constraint_id = self._digest(automaton, pattern, eos, control)
            entry = self.entries[constraint_id] = _Entry(automaton)
            automaton.on_compile = self._on_compile(entry)
            self.ids[key] = constraint_id
        self.entries.move_to_end(constraint_id)
        self._fit(entry)
        return CompileReply(constraint_id=constraint_id, pattern=pattern, initial_state=entry.automaton.initial_state,
                            vocab_size=self.vocab_size, eos_token_ids=list(eos))

    def _pattern(self, msg: Compile) -> str:
        given = [msg.pattern is not None, msg.json_schema is not None, msg.tools is not None]
        if sum(given) != 1:
            raise CodedError(ErrorCode.INVALID, "give exactly one of pattern, json_schema, tools")
        for value, name in ((msg.json_schema, "json_schema"), (msg.tools, "tools")):
            if value is not None and nesting_depth(value, self.options.max_depth) > self.options.max_depth:
                raise CodedError(ErrorCode.TOO_LARGE, f"{name} nests deeper than {self.options.max_depth} levels")
        try:
            if msg.pattern is not None:
                return msg.pattern
            if msg.json_schema is not None:
                from tokworker.constrain.json_schema import json_schema_to_regex
                return json_schema_to_regex(msg.json_schema)
            from tokworker.constrain.tool_choice import tool_call_pattern
            return tool_call_pattern(msg.tools, msg.tool_name, format=msg.format)
        except ImportError as exc:
            raise CodedError(ErrorCode.UNAVAILABLE, f"constraints are not available: {exc}") from None

    def _control_tokens(self, msg: Compile) -> tuple:
        """The special tokens a forced tool call may emit as themselves (Mistral's [TOOL_CALLS])."""
        if msg.tools is None:
            return ()
        from tokworker.constrain.tool_choice import control_tokens
        return tuple(sorted(control_tokens(msg.format, self.tokenizer.added_tokens).items()))

    def _trie(self, control: tuple):
        trie = self.tries.get(control)
        if trie is None:
            from tokworker.constrain import VocabTrie
            if len(self.tries) >= MAX_TRIES:
                self.tries.pop(next(iter(self.tries)))
            trie = self.tries[control] = VocabTrie(self.tokenizer.vocab_bytes(), control_tokens=dict(control))
        return trie

    def _digest(self, automaton, pattern: str, eos: tuple, control: tuple) -> str:
        dfa = automaton.dfa
        digest = hashlib.sha256(f"{self.fingerprint}\0{pattern}\0{eos}\0{control}\0".encode("utf-8", "surrogatepass"))
        digest.update(array("i", chain.from_iterable(dfa.rows)).tobytes())
        digest.update(bytes(dfa.accepting))
        return digest.hexdigest()[:32]

    # ------------------------------------------------------------ guide: the per-step query
    def _guide(self, msg: Guide) -> GuideReply:
        if len(msg.queries) > self.options.max_batch:
            raise CodedError(ErrorCode.TOO_LARGE, f"guide over {self.options.max_batch} queries")
        results, errors = {}, {}
        masks: list[bytes] = []
        mask_index: dict[bytes, int] = {}       # by content: equal masks of different states or constraints too
        entries = self.entries
        from tokworker.constrain import ConstraintError
        for key, query in msg.queries.items():
            entry = entries.get(query.constraint_id)
            if entry is None:
                errors[key] = Error(ErrorCode.UNKNOWN_CONSTRAINT, f"no constraint {query.constraint_id!r} here: "
                                                                   "compile it again")
                continue
            entries.move_to_end(query.constraint_id)
            automaton = entry.automaton
            try:
                state = query.state
                for token_id in query.ids:
                    state = automaton.advance(state, token_id)
                mask = entry.masks.get(state)
                if mask is None:
                    mask = self._bits(automaton.allowed_mask(state))
                    if state in entry.states:             # its tables are kept: so is its mask
                        entry.masks[state] = mask
                        entry.states[state] += len(mask)
                        entry.states.move_to_end(state)
                        self._fit(entry)
                elif state in entry.states:
                    entry.states.move_to_end(state)
                index = mask_index.get(mask)
                if index is None:
                    index = mask_index[mask] = len(masks)
                    masks.append(mask)
                results[key] = GuideResult(state=state, mask=index, accepting=automaton.is_accepting(state))
            except ConstraintError as exc:
                errors[key] = Error(ErrorCode.INVALID, str(exc))
        return GuideReply(results=results, masks=masks, errors=errors)

    def _bits(self, byte_mask: bytes) -> bytes:
        """One byte per id (0/1) -> one bit per id, LSB first: as a binary numeral read backwards."""
        return int(byte_mask.translate(_BITS)[::-1] or b"0", 2).to_bytes(self.mask_bytes, "little")

    # ------------------------------------------------------------ bounds
    def _on_compile(self, entry: _Entry):
        def compiled(state: int, cost: int) -> None:
            entry.states[state] = cost
            self._compiled.append((entry, state))
            self._fit(entry)
        return compiled

    def _fit(self, current: _Entry) -> None:
        """Drop least recently used automata while over a bound, then, when the current one is over a bound
        alone, its own least recently used states (never the one compiled last)."""
        options, entries = self.options, self.entries
        while True:
            count = sum(len(entry.states) for entry in entries.values())
            size = sum(entry.cost() for entry in entries.values())
            if len(entries) <= options.max_constraints and count <= options.max_constraint_states \
                    and size <= self.max_bytes:
                break
            oldest = next(iter(entries.values()))
            if oldest is not current:
                entries.popitem(last=False)
            elif len(current.states) > 1:
                current.drop(next(iter(current.states)))
            else:
                break
        if len(self.ids) > len(entries):
            self.ids = {key: cid for key, cid in self.ids.items() if cid in entries}

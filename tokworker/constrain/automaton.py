"""Regex -> token automaton: per DFA state, which token ids may come next and where each one leads.

A token is allowed in a state exactly when its bytes take the DFA from that state to a live state, and the
DFA is trimmed (every live state can still reach acceptance), so: every token path the automaton allows
spells a prefix of some matching string, a path that ends in an accepting state spells a matching string,
and every tokenization of a matching string (the canonical one included) is a path the automaton allows.

States are compiled lazily, on first use, by one walk of the vocabulary trie (vocab_trie.py), and kept:
at most one entry per DFA state, so the cache is bounded by the DFA. A state with many allowed tokens keeps
its next states as one array indexed by token id; a state with few keeps a dict.

Special tokens (b"" in vocab_bytes) are never allowed; a VocabTrie built with `control_tokens` opts chosen
special tokens in under their text (Mistral's [TOOL_CALLS] must be the control token, not spelled out).
EOS ids are allowed only in accepting states and consume nothing.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import compress

from tokworker.constrain.regex_dfa import DEAD, compile_dfa
from tokworker.constrain.vocab_trie import VocabTrie, blocked_masks

__all__ = ["ConstraintError", "TokenAutomaton", "VocabTrie"]

_DENSE_FRACTION = 32


class ConstraintError(ValueError):
    """A token that the constraint does not allow, or a state that does not exist."""


class TokenAutomaton:
    """The token-level automaton of `pattern` over a vocabulary, for masking logits step by step:

        state = automaton.initial_state
        while True:
            ids = automaton.allowed(state)          # sorted token ids; only these may be sampled
            token = sample(logits, ids)
            if token in eos_ids: break
            state = automaton.advance(state, token)

    When `allowed(state)` is empty the constraint is complete (an accepting state with no continuation
    and no EOS id given): stop generating. `vocab_bytes` is the tokenizer's `vocab_bytes()` or, better,
    a VocabTrie built once from it and shared by every automaton of that tokenizer.
    """

    def __init__(self, pattern: str, vocab_bytes: Sequence[bytes] | VocabTrie, eos_ids: Iterable[int] = ()):
        self.dfa = compile_dfa(pattern)
        self.trie = vocab_bytes if isinstance(vocab_bytes, VocabTrie) else VocabTrie(vocab_bytes)
        self.eos_ids = sorted(set(eos_ids))
        if any(not (isinstance(e, int) and 0 <= e < self.trie.vocab_size) for e in self.eos_ids):
            raise ConstraintError(f"eos ids {self.eos_ids} outside the vocabulary of {self.trie.vocab_size}")
        self.initial_state = self.dfa.initial
        if self.initial_state == DEAD:
            raise ConstraintError(f"the pattern matches no text at all: {pattern[:200]!r}")
        self._blocked = blocked_masks(self.dfa.rows)
        self._next: dict[int, dict | array] = {}
        self._allowed: dict[int, array] = {}
        self._mask: dict[int, bytes] = {}
        # called as on_compile(state, bytes) after each state is compiled (a cache's accounting)
        self.on_compile = None

    @property
    def base_bytes(self) -> int:
        """What the automaton holds before any state is compiled: its DFA's rows and pattern, a loop mask
        per DFA state."""
        return (2100 + 64) * self.dfa.num_states + 2 * len(self.dfa.pattern)

    def forget(self, states) -> None:
        """Drop the compiled tables of `states` (compiled again when next used)."""
        for state in states:
            self._next.pop(state, None)
            self._allowed.pop(state, None)
            self._mask.pop(state, None)

    def compiled_states(self) -> set[int]:
        """Every state with a table (or part of one, where a compile was stopped half way)."""
        return set(self._next) | set(self._allowed) | set(self._mask)

    def is_accepting(self, state: int) -> bool:
        """True when the text so far fully matches the pattern (EOS may be sampled here)."""
        self._check(state)
        return self.dfa.accepting[state]

    def allowed(self, state: int) -> array:
        """Sorted token ids allowed in `state` (an array('i'); EOS ids included when accepting)."""
        allowed = self._allowed.get(state)
        if allowed is None:
            self._compile(state)
            allowed = self._allowed.get(state)
            if allowed is None:
                mask = self._mask[state]
                allowed = self._allowed[state] = array("i", compress(range(len(mask)), mask))
        return allowed

    def allowed_mask(self, state: int) -> bytes:
        """One byte per token id, 1 where the token is allowed in `state` (EOS included when accepting):
        what an engine turns into a logits mask without a Python loop (e.g. torch.frombuffer)."""
        mask = self._mask.get(state)
        if mask is None:
            self._compile(state)
            mask = self._mask.get(state)
            if mask is None:
                out = bytearray(self.trie.vocab_size)
                for token in self._allowed[state]:
                    out[token] = 1
                mask = bytes(out)
        return mask

    def advance(self, state: int, token_id: int) -> int:
        """The state after `token_id`; ConstraintError when the token is not allowed in `state`."""
        table = self._next.get(state)
        if table is None:
            table = self._compile(state)
        if type(table) is dict:
            next_state = table.get(token_id, DEAD)
        elif isinstance(token_id, int) and 0 <= token_id < self.trie.vocab_size:
            next_state = table[self.trie.position_of[token_id]]
        else:
            next_state = DEAD
        if next_state:
            return next_state
        if token_id in self.eos_ids and self.dfa.accepting[state]:
            return state
        raise ConstraintError(f"token {token_id!r} is not allowed in state {state}")

    def compile_all(self) -> int:
        """Compile every state reachable from the initial one; returns how many there are."""
        seen, stack = {self.initial_state}, [self.initial_state]
        while stack:
            table = self._compile(stack.pop())
            for next_state in set(table.values() if type(table) is dict else table):
                if next_state and next_state not in seen:
                    seen.add(next_state)
                    stack.append(next_state)
        return len(seen)

    def _check(self, state: int) -> None:
        if not isinstance(state, int) or not 0 < state < self.dfa.num_states:
            raise ConstraintError(f"no live state {state!r} in this automaton")

    def _compile(self, state: int):
        table = self._next.get(state)
        if table is not None:
            return table
        self._check(state)
        positions, states, ranges, dead = self.trie.walk(self.dfa.rows, self._blocked, state)
        count = len(positions) + sum(stop - first for first, stop, _ in ranges)
        eos = self.eos_ids if self.dfa.accepting[state] else ()
        if count * _DENSE_FRACTION > self.trie.vocab_size:
            table = self._dense(positions, states, ranges)
            self._mask[state] = self._dense_mask(table, count, dead, eos)
            cost = 4 * len(table) + self.trie.vocab_size
        else:
            table = self._sparse(positions, states, ranges)
            self._allowed[state] = array("i", sorted(set(table).union(eos)))
            cost = 100 * len(table) + 4 * len(self._allowed[state])
        self._next[state] = table
        if self.on_compile is not None:
            self.on_compile(state, cost + 256)
        return table

    def _dense(self, positions, states, ranges) -> array:
        """Next state per trie position (token_order index), ranges filled by slice assignment."""
        trie = self.trie
        by_position = array("i", bytes(4 * (len(trie.token_order) + 1)))
        for pos, next_state in zip(positions, states):
            by_position[pos] = next_state
        for first, stop, next_state in ranges:
            by_position[first:stop] = array("i", [next_state]) * (stop - first)
        for first, extra in trie.duplicates.items():
            if by_position[first]:
                by_position[first + 1:first + 1 + extra] = array("i", [by_position[first]]) * extra
        return by_position

    def _dense_mask(self, by_position: array, count: int, dead, eos) -> bytes:
        """The allowed mask by token id, written from whichever side is smaller: the allowed positions
        or the disallowed ones (dead subtrees and tokens outside the trie)."""
        trie = self.trie
        order = trie.token_order
        if count * 2 <= len(order):
            mask = bytearray(trie.vocab_size)
            for pos, next_state in enumerate(by_position):
                if next_state:
                    mask[order[pos]] = 1
        else:
            mask = bytearray(b"\x01") * trie.vocab_size
            for token in trie.absent_ids:
                mask[token] = 0
            for first, stop in dead:
                for token in order[first:stop]:
                    mask[token] = 0
        for token in eos:
            mask[token] = 1
        return bytes(mask)

    def _sparse(self, positions, states, ranges) -> dict[int, int]:
        order, duplicates = self.trie.token_order, self.trie.duplicates
        table = {}
        for pos, next_state in zip(positions, states):
            for p in range(pos, pos + 1 + duplicates.get(pos, 0)):
                table[order[p]] = next_state
        for first, stop, next_state in ranges:
            for p in range(first, stop):
                table[order[p]] = next_state
        return table

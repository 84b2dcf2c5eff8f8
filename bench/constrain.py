"""Forced tool calls on a real 151,669-token vocabulary (Qwen3): what compiling the constraint costs.

Per case: the regex, its DFA, the first state's mask (what a request waits for before its first token),
the whole automaton, and the per-token cost of stepping a forced call (mask + advance) on its canonical
tokenization. When outlines-core is installed (a Rust reference, optional) the same pattern is compiled
there in the same run, its allowed sets are checked against ours, and the ratio is reported.
"""

from __future__ import annotations

import time
from pathlib import Path

from tokworker.constrain import TokenAutomaton, VocabTrie
from tokworker.constrain.regex_dfa import Dfa
from tokworker.constrain.tool_choice import tool_call_pattern

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["location"], "properties": {
        "location": {"type": "string", "description": "City and country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
FLIGHT = {"type": "function", "function": {"name": "book_flight", "parameters": {
    "type": "object", "required": ["passengers", "route"], "additionalProperties": False, "properties": {
        "route": {"type": "object", "required": ["from", "to"], "properties": {
            "from": {"type": "string", "pattern": "^[A-Z]{3}$"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "date": {"type": "string", "format": "date"}}},
        "passengers": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
            "type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "seat": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}},
        "class": {"enum": ["economy", "premium", "business"]}, "notes": {"type": "string", "maxLength": 200}}}}}
CASES = [
    ("get_weather (named, hermes)", [WEATHER], "get_weather",
     '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}\n</tool_call>'),
    ("book_flight nested (named, hermes)", [WEATHER, FLIGHT], "book_flight",
     '<tool_call>\n{"name": "book_flight", "arguments": {"route": {"from": "CDG", "to": "NRT"}, "passengers": '
     '[{"name": "Ana Souza", "age": 34}, {"name": "李明", "seat": null}], "class": "economy"}}\n</tool_call>'),
    ("required: any of 2 tools (hermes)", [WEATHER, FLIGHT], None,
     '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Oslo"}}\n</tool_call>'),
]


def _qwen_tokenizer():
    """(vocab bytes, eos id, encode, source) from tokworker's own Tokenizer; None without the vocabulary."""
    from bench.realdata import VOCABULARIES
    from tokworker.tokenizer import Tokenizer
    directory = VOCABULARIES["qwen3_dir"]()
    if directory is None:
        return None
    tokenizer = Tokenizer.from_dir(directory)
    return tokenizer.vocab_bytes(), tokenizer.eos_token_ids[0], tokenizer.encode, "tokworker"


def _seconds(function):
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def _outlines(pattern, vocab, eos, checks, automaton):
    """Compile the same pattern with outlines-core (if installed); check allowed sets on some states."""
    try:
        from outlines_core import Index, Vocabulary
    except ImportError:
        return {}
    tokens: dict[bytes, list[int]] = {}
    for token_id, data in enumerate(vocab):
        if data and token_id != eos:
            tokens.setdefault(data, []).append(token_id)
    vocabulary = Vocabulary(eos, tokens)
    seconds, index = _seconds(lambda: Index(pattern, vocabulary))
    state, theirs_state, agree = automaton.initial_state, index.get_initial_state(), True
    for token in checks:
        theirs = set(index.get_allowed_tokens(theirs_state))
        agree &= theirs == set(automaton.allowed(state))
        state, theirs_state = automaton.advance(state, token), index.get_next_state(theirs_state, token)
    return {"outlines_core_index_ms": round(seconds * 1000, 1), "same_allowed_sets_as_outlines_core": agree}


def run(quick: bool = False, model_dirs: list[Path] | None = None) -> list[dict]:
    loaded = _qwen_tokenizer()
    if loaded is None:
        return [{"case": "skipped: Qwen3 vocabulary not installed"}]
    vocab, eos, encode, source = loaded
    trie_seconds, trie = _seconds(lambda: VocabTrie(vocab))
    rows = [{"case": "VocabTrie (once per tokenizer)", "vocabulary": f"qwen3 ({len(vocab)} tokens, via {source})",
             "trie_nodes": trie.num_nodes, "build_ms": round(trie_seconds * 1000, 1)}]
    for case, tools, name, example in CASES[:1] if quick else CASES:
        pattern = tool_call_pattern(tools, name=name)
        dfa_seconds, dfa = _seconds(lambda: Dfa(pattern))
        first_seconds, automaton = _seconds(lambda: _first_mask(pattern, trie, eos))
        full_seconds, states = _seconds(automaton.compile_all)
        ids = encode(example)
        step_seconds, _ = _seconds(lambda: _step_through(automaton, ids))
        cold = TokenAutomaton(pattern, trie, eos_ids=[eos])
        cold_seconds, _ = _seconds(lambda: _step_through(cold, ids))
        row = {"case": case, "vocabulary": f"qwen3 ({len(vocab)} tokens)", "regex_chars": len(pattern),
               "dfa_states": dfa.num_states, "dfa_ms": round(dfa_seconds * 1000, 1),
               "first_mask_ms": round(first_seconds * 1000, 1), "token_states": states,
               "full_compile_ms": round((first_seconds + full_seconds) * 1000, 1),
               "forced_call_tokens": len(ids), "lazy_call_ms": round(cold_seconds * 1000, 1),
               "warm_step_us_per_token": round(step_seconds / len(ids) * 1e6, 1)}
        row.update(_outlines(pattern, vocab, eos, ids, automaton))
        if "outlines_core_index_ms" in row:
            row["full_compile_ratio_vs_outlines_core"] = round(row["outlines_core_index_ms"] / row["full_compile_ms"], 2)
        rows.append(row)
    return rows


def _first_mask(pattern, trie, eos):
    automaton = TokenAutomaton(pattern, trie, eos_ids=[eos])
    automaton.allowed_mask(automaton.initial_state)
    return automaton


def _step_through(automaton, ids):
    state = automaton.initial_state
    for token in ids:
        automaton.allowed_mask(state)
        state = automaton.advance(state, token)
    assert automaton.is_accepting(state)

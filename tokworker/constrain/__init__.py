"""Forced tool calls as guarantees: JSON Schema -> regex -> byte DFA -> token automaton.

    pattern = tool_call_pattern(tools, name="get_weather", format="hermes")
    trie = VocabTrie(tokenizer.vocab_bytes())          # once per tokenizer
    automaton = TokenAutomaton(pattern, trie, eos_ids=tokenizer.eos_token_ids)
"""

from tokworker.constrain.automaton import ConstraintError, TokenAutomaton
from tokworker.constrain.regex_syntax import RegexError
from tokworker.constrain.vocab_trie import VocabTrie

__all__ = ["ConstraintError", "RegexError", "TokenAutomaton", "VocabTrie", "json_schema_to_regex",
           "tool_call_pattern"]


def __getattr__(name):
    if name == "json_schema_to_regex":
        from tokworker.constrain.json_schema import json_schema_to_regex
        return json_schema_to_regex
    if name == "tool_call_pattern":
        from tokworker.constrain.tool_choice import tool_call_pattern
        return tool_call_pattern
    raise AttributeError(f"module 'tokworker.constrain' has no attribute {name!r}")

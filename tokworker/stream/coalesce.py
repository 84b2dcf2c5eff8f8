"""Merging a step's deltas: adjacent deltas of one kind become one, so a client gets one delta per kind per
step however the stages split the text."""

from __future__ import annotations

from tokworker.protocol.deltas import Delta


def coalesce(deltas: list[Delta]) -> list[Delta]:
    """Adjacent deltas of one kind become one: content with content, reasoning with reasoning, and a call's
    argument fragments with the fragment before them."""
    if len(deltas) < 2:
        return deltas
    out = [deltas[0]]
    for delta in deltas[1:]:
        last = out[-1]
        if delta.content is not None and last.content is not None and last.tool_calls is None:
            out[-1] = Delta(content=last.content + delta.content)
        elif (delta.reasoning_content is not None and last.reasoning_content is not None
              and last.tool_calls is None):
            out[-1] = Delta(reasoning_content=last.reasoning_content + delta.reasoning_content)
        elif _is_argument_fragment(delta) and last.tool_calls and last.tool_calls[-1].index == delta.tool_calls[0].index \
                and last.tool_calls[-1].function is not None:
            previous = last.tool_calls[-1]
            merged = (previous.function.arguments or "") + delta.tool_calls[0].function.arguments
            calls = last.tool_calls[:-1] + [type(previous)(index=previous.index, id=previous.id, type=previous.type,
                                                           function=type(previous.function)(name=previous.function.name,
                                                                                            arguments=merged))]
            out[-1] = Delta(tool_calls=calls)
        else:
            out.append(delta)
    return out


def _is_argument_fragment(delta: Delta) -> bool:
    calls = delta.tool_calls
    if not calls or len(calls) != 1 or delta.content is not None or delta.reasoning_content is not None:
        return False
    call = calls[0]
    return (call.id is None and call.type is None and call.function is not None and call.function.name is None
            and call.function.arguments is not None)

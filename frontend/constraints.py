"""Constrained decoding through the pool: a Constraint lives on the worker that compiled it, and one `guide`
message per worker per engine step returns every constrained sequence's next state and token bitmask.

    constraint = await pool.compile(tools=tools, tool_name="get_weather")
    state, sampled = constraint.initial_state, []
    while True:
        result = (await pool.guide({"req-1": (constraint, state, sampled)}))["req-1"]
        state = result.state            # result.mask: ceil(vocab/32) little-endian int32 words, 1 = allowed
        sampled = [sample(logits, result.mask)]

A worker that restarted (or evicted the automaton) answers `unknown_constraint`; the pool compiles the
same request there again, which gives the same id and state numbers, and asks once more.
"""

from __future__ import annotations

import asyncio

import msgspec

from tokworker.protocol.messages import CompileReply, ErrorCode, Guide, GuideQuery
from tokworker.frontend.errors import PoolError, error_for
from tokworker.frontend.link import encode_request


class GuideStep(msgspec.Struct, gc=False):
    """One sequence's answer for one step: its new state, the token bitmask (bit t % 32 of little-endian
    32-bit word t // 32 set when token t may come next) and whether EOS may be sampled. Sequences whose
    masks are equal in one reply share the same bytes object (the wire carries each distinct mask once)."""

    state: int
    mask: bytes
    accepting: bool = False


class Constraint:
    """A compiled constraint: its id on its worker, the regex it came to, the start state, and how many
    token ids its masks cover (`vocab_size`; masks are (vocab_size + 31) // 32 * 4 bytes)."""

    __slots__ = ("id", "pattern", "initial_state", "vocab_size", "eos_token_ids", "link", "request")

    def __init__(self, reply: CompileReply, link, request: bytes):
        self.id = reply.constraint_id
        self.pattern = reply.pattern
        self.initial_state = reply.initial_state
        self.vocab_size = reply.vocab_size
        self.eos_token_ids = reply.eos_token_ids
        self.link = link
        self.request = request                  # the encoded Compile, to compile it again where it was lost

    def __repr__(self) -> str:
        return f"Constraint({self.id!r}, pattern={self.pattern[:60]!r}, initial_state={self.initial_state})"


async def compile_on(link, request: bytes, timeout: float | None) -> Constraint:
    reply = await link.request(request, timeout=timeout)
    return Constraint(reply, link, request)


async def guide(pool, queries: dict, timeout: float | None = None) -> dict[str, GuideStep | PoolError]:
    """{name: (constraint, state, ids sampled since)} -> {name: GuideStep, or the PoolError of that query}."""
    by_link: dict = {}
    results: dict = {}
    for name, (constraint, state, ids) in queries.items():
        if not isinstance(constraint, Constraint):
            raise TypeError(f"query {name!r}: expected a Constraint from pool.compile, got {type(constraint).__name__}")
        if constraint.link.down:
            try:
                await _move(pool, constraint, timeout)
            except PoolError as error:
                results[name] = error
                continue
        by_link.setdefault(constraint.link, {})[name] = (constraint, state, ids)
    parts = await asyncio.gather(*(_guide_link(link, group, timeout) for link, group in by_link.items()))
    for part in parts:
        results.update(part)
    return results


async def _guide_link(link, group: dict, timeout: float | None) -> dict:
    """One worker's queries; those whose constraint the worker lost are compiled there again and re-asked."""
    results = await _ask(link, group, timeout)
    lost = {name for name, result in results.items()
            if isinstance(result, PoolError) and result.code == ErrorCode.UNKNOWN_CONSTRAINT}
    if not lost:
        return results
    constraints = list({group[name][0] for name in lost})
    recompiled = await asyncio.gather(*(_recompile(c, timeout) for c in constraints), return_exceptions=True)
    failed = {c: error for c, error in zip(constraints, recompiled) if error is not None}
    retry = {name: group[name] for name in lost if group[name][0] not in failed}
    results.update({name: failed[group[name][0]] for name in lost if group[name][0] in failed})
    if retry:
        results.update(await _ask(link, retry, timeout))
    return results


async def _ask(link, group: dict, timeout: float | None) -> dict:
    """Send the queries in as few messages as the reply size limit allows (sized for the worst case: every
    mask distinct, each of a fixed size)."""
    names = list(group)
    mask_bytes = (next(iter(group.values()))[0].vocab_size + 31) // 32 * 4
    per_message = max(1, min(link.info.limits.max_batch, link.max_message_bytes // 2 // (mask_bytes + 64)))
    chunks = [names[i:i + per_message] for i in range(0, len(names), per_message)]
    requests = []
    for chunk in chunks:
        queries = {name: GuideQuery(constraint_id=group[name][0].id, state=group[name][1], ids=list(group[name][2]))
                   for name in chunk}
        requests.append(link.request(encode_request(Guide(queries=queries)), timeout=timeout))
    replies = await asyncio.gather(*requests, return_exceptions=True)
    results: dict = {}
    for chunk, reply in zip(chunks, replies):
        if isinstance(reply, PoolError):
            results.update(dict.fromkeys(chunk, reply))
            continue
        if isinstance(reply, BaseException):
            raise reply
        masks = reply.masks
        for name, result in reply.results.items():
            if 0 <= result.mask < len(masks):
                results[name] = GuideStep(result.state, masks[result.mask], result.accepting)
            else:
                results[name] = PoolError(ErrorCode.INTERNAL, f"the worker's guide reply has no mask {result.mask}")
        for name, error in reply.errors.items():
            results[name] = error_for(error.code, error.message)
        for name in chunk:
            if name not in results:
                results[name] = PoolError(ErrorCode.INTERNAL, "the worker's guide reply left this query out")
    return results


async def _recompile(constraint: Constraint, timeout: float | None) -> PoolError | None:
    """Compile the constraint's request again on its worker; None when it came back the same."""
    try:
        reply = await constraint.link.request(constraint.request, timeout=timeout)
    except PoolError as error:
        return error
    if reply.constraint_id != constraint.id or reply.initial_state != constraint.initial_state:
        return PoolError(ErrorCode.CONSTRAINT_CHANGED, f"compiling {constraint.id} again gave {reply.constraint_id}: its "
                                               "state numbers cannot be trusted; compile it anew")
    return None


async def _move(pool, constraint: Constraint, timeout: float | None) -> None:
    """The constraint's worker is unreachable: compile it on the least loaded reachable one instead."""
    link = pool._least_loaded()
    moved = await compile_on(link, constraint.request, timeout)
    if moved.id != constraint.id or moved.initial_state != constraint.initial_state:
        raise PoolError(ErrorCode.CONSTRAINT_CHANGED, f"compiling {constraint.id} elsewhere gave {moved.id}")
    constraint.link = link

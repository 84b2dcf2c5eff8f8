"""A request's fan-out priced before any work: its prompts x `n` choices, each a stream generating up to
`max_tokens`, against the server's limits (a 20 KB request of 4,096 prompts x n 128 is refused in
milliseconds instead of running for tens of seconds)."""

from __future__ import annotations

from tokworker.api.errors import ApiError
from tokworker.api.plan import Plan, Served
from tokworker.engines.base import SamplingParams  # noqa: F401 (the doctest builds plans)
from tokworker.protocol.deltas import StreamParams  # noqa: F401 (the doctest builds plans)
from tokworker.protocol.messages import ErrorCode


def price(plan: Plan, served: Served) -> None:
    """A request's fan-out priced before any work: its prompts x `n` choices, each a stream generating up to
    `max_tokens`, against the server's limits. ApiError: 400 when max_tokens is past the context, 413 when
    the choices are more than the server ever serves at once, 429 when they are more than it has room for now.

    >>> served = Served("m", None, 4096, 50000, max_choices=256, room=lambda: 100)
    >>> def plan(prompts, n, max_tokens=None):
    ...     return Plan(api="completions", model="m", stream=False, params=StreamParams(),
    ...                 sampling=SamplingParams(max_tokens=1), max_tokens=max_tokens, n=n, prompts=["x"] * prompts)
    >>> price(plan(200, 128, 16), served)
    Traceback (most recent call last):
    ...
    tokworker.api.errors.ApiError: too_large: 200 prompts x n 128 is 25600 choices generating up to 409600 tokens: ...
    >>> price(plan(8, 16), served)
    Traceback (most recent call last):
    ...
    tokworker.api.errors.ApiError: overloaded: 8 prompts x n 16 is 128 choices ...: the server has room for 100 more now
    >>> price(plan(1, 2, 5000), served)
    Traceback (most recent call last):
    ...
    tokworker.api.errors.ApiError: invalid: max_tokens is 5000, past this model's context (4096 tokens)
    >>> price(plan(4, 8, 16), served)
    """
    if plan.max_tokens is not None and plan.max_tokens > served.max_model_len:
        field = "max_output_tokens" if plan.api == "responses" else "max_tokens"
        raise ApiError.invalid(f"{field} is {plan.max_tokens}, past this model's context ({served.max_model_len} "
                               f"tokens)", field)
    prompts = len(plan.prompts) if plan.prompts is not None else 1
    choices = prompts * plan.n
    if choices == 1:
        return
    what = (f"{prompts} prompts x n {plan.n} is {choices} choices generating up to "
            f"{choices * (plan.max_tokens or served.max_model_len)} tokens")
    if choices > served.max_choices:
        raise ApiError(ErrorCode.TOO_LARGE, f"{what}: more streams than this server serves at once "
                                            f"({served.max_choices}: --max-concurrent-requests and the pool's "
                                            f"streams)", "n" if plan.n > 1 else "prompt")
    room = served.room() if served.room is not None else choices
    if choices > room:
        raise ApiError(ErrorCode.OVERLOADED, f"{what}: the server has room for {max(room, 0)} more now")


def priced(planner):
    """`planner` with its plan priced (price) before it is returned: what the generation routes use."""
    def plan(request, served: Served) -> Plan:
        mapped = planner(request, served)
        price(mapped, served)
        return mapped
    return plan

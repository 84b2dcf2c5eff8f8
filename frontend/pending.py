"""What a link keeps for a request in flight: its body, its attempts and deadline, and what its answer
goes to. A Call resolves a future (most requests); a stream step's share (stream.StepPart) updates its
streams and its engine step; a Probe only shows the worker is alive."""

from __future__ import annotations

from tokworker.protocol.messages import ErrorReply
from tokworker.frontend.errors import PoolError, error_for


class Pending:
    """One request in flight: its encoded body and what to do with the reply. `reply(reply)` and
    `fail(error)` run as soon as the answer is known; subclasses say what they mean (a future to resolve,
    a share of an engine step). `stateful` requests (streams) may not be lost: a timeout fences the link."""

    __slots__ = ("body", "stateful", "attempts", "deadline", "rid", "replay")

    def __init__(self, body: bytes, stateful: bool, replay: bool = False):
        self.body, self.stateful, self.attempts, self.deadline, self.rid = body, stateful, 0, 0.0, 0
        self.replay = replay                 # a rebuild of a stream: superseded by the next epoch's own

    def step_ids(self) -> dict:
        """The ids this request sends for each stream (a step's), which a stream's replay leaves out."""
        return {}

    def abandoned(self) -> bool:
        """Nobody waits for the answer any more (not re-sent after a reconnect)."""
        return False

    def abandon(self) -> None:
        pass

    def detach(self) -> None:
        """Its worker hangs: whoever waits with others should not wait for this one (a step's share)."""

    def reply(self, reply) -> None:
        raise NotImplementedError

    def fail(self, error: PoolError) -> None:
        raise NotImplementedError


class Call(Pending):
    """A request whose caller awaits `future`: the reply (or on_reply's result of it), or the PoolError."""

    __slots__ = ("future", "on_reply", "on_error")

    def __init__(self, body, future, on_reply=None, on_error=None, stateful=False, replay=False):
        super().__init__(body, stateful, replay)
        self.future, self.on_reply, self.on_error = future, on_reply, on_error

    def abandoned(self) -> bool:
        return self.future.done() and not self.stateful

    def abandon(self) -> None:
        if not self.future.done():
            self.future.cancel()

    def reply(self, reply) -> None:
        if type(reply) is ErrorReply:
            self.fail(error_for(reply.code, reply.message))
            return
        try:
            result = self.on_reply(reply) if self.on_reply is not None else reply
        except PoolError as exc:
            self.fail(exc)
            return
        if not self.future.done():
            self.future.set_result(result)

    def fail(self, error: PoolError) -> None:
        if self.on_error is not None:
            self.on_error(error)
        if not self.future.done():
            self.future.set_exception(error)


class Probe(Pending):
    """A stats request that only shows the worker is alive (any reply does that); never sent twice."""

    __slots__ = ()

    def reply(self, reply) -> None:
        pass

    def fail(self, error: PoolError) -> None:
        pass

    def abandoned(self) -> bool:
        return True

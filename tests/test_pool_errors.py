"""One error vocabulary: every code the pool and the workers use is an ErrorCode value, one base class
carries it on both sides, the worker's one mapping tells the client's bad input from our own bugs, and a
failed stream tells step() its code and message (a chunked stream as an OpenAI-style error event)."""

from __future__ import annotations

from pathlib import Path

import pytest
import uvloop

from tokworker.frontend import TokenizerPool
from tokworker.frontend.errors import InvalidRequest, PoolError, ShuttingDown, StreamFailed, error_for
from tokworker.frontend.stream import StreamFailure
from tokworker.protocol.deltas import ChunkFormat, StreamParams
from tokworker.protocol.messages import CodedError, ErrorCode
from tokworker.stream.detokenizer import DetokenizeError
from tokworker.templates.errors import TemplateRenderError, UntrustedTemplateError
from tokworker.worker.errors import error_of
from tokworker.worker.limits import BudgetExceeded

MODEL = Path(__file__).resolve().parent.parent / "tokworker" / "data" / "default"
CODES = {value for name, value in vars(ErrorCode).items() if name.isupper()}
ROOT = Path(__file__).resolve().parent.parent


def test_codes_are_distinct_and_include_drain_and_memory():
    names = [name for name in vars(ErrorCode) if name.isupper()]
    assert len(CODES) == len(names)
    assert {ErrorCode.SHUTTING_DOWN, ErrorCode.OUT_OF_MEMORY, ErrorCode.CLOSED, ErrorCode.INTERNAL} <= CODES


def test_no_bare_string_codes_in_the_pool_or_the_worker():
    """Codes are written as ErrorCode attributes, never as string literals."""
    import re
    sources = [*ROOT.joinpath("frontend").glob("*.py"), *ROOT.joinpath("tokworker", "worker").glob("*.py")]
    pattern = re.compile(r"\b(?:PoolError|CodedError|Error|error_for|[A-Z][a-z]+(?:Request|Stream|Lost)|Overloaded)\(\s*\"")
    offenders = [f"{path.name}: {line.strip()}" for path in sources for line in path.read_text().splitlines()
                 if pattern.search(line)]
    assert offenders == []


def test_one_base_error_carries_the_code_on_both_sides():
    for code in CODES:
        error = error_for(code, "why")
        assert isinstance(error, CodedError) and isinstance(error, PoolError)
        assert (error.code, error.message) == (code, "why")
    assert isinstance(error_for(ErrorCode.SHUTTING_DOWN), ShuttingDown)   # a WorkerLost: new work goes elsewhere


def test_the_workers_mapping_tells_bad_input_from_our_bugs():
    assert error_of(CodedError(ErrorCode.STALE, "moved")) == (ErrorCode.STALE, "moved")
    assert error_of(DetokenizeError("id 999999 is not in the vocabulary"))[0] == ErrorCode.INVALID
    assert error_of(UntrustedTemplateError("no"))[0] == ErrorCode.FORBIDDEN
    assert error_of(TemplateRenderError("boom"))[0] == ErrorCode.TEMPLATE
    assert error_of(BudgetExceeded(), 2.5) == (ErrorCode.TIMEOUT, "over this worker's budget of 2.5 s")
    assert error_of(MemoryError())[0] == ErrorCode.OUT_OF_MEMORY
    try:
        {}["missing"]
    except KeyError as exc:                                   # a bug of ours, not the client's INVALID
        assert error_of(exc) == (ErrorCode.INTERNAL, "KeyError: 'missing'")
    try:
        len(5)
    except TypeError as exc:
        assert error_of(exc)[0] == ErrorCode.INTERNAL


@pytest.mark.slow  # worker processes
def test_a_failed_stream_tells_step_its_code_and_message():
    async def main():
        async with await TokenizerPool.spawn(MODEL, workers=1) as pool:
            await pool.open_stream("plain", buffer=False)
            chunked = await pool.open_stream("sse", chunks=ChunkFormat(id="chatcmpl-1", model="m", created=1))
            updates = await pool.step({"plain": [10**6], "sse": [10**6]})
            plain, sse = updates["plain"], updates["sse"]
            assert isinstance(plain, StreamFailure) and plain.finish_reason == "error" and plain.abort
            assert plain.code == ErrorCode.INVALID and "1000000" in plain.message
            # a chunked stream's failure is the same: whoever writes its response writes the error in its format
            assert isinstance(sse, StreamFailure) and (sse.code, sse.message, sse.sse) == (plain.code, plain.message, b"")
            assert (await pool.step({"plain": [5]}))["plain"].finish_reason is None     # reported once, then over
            with pytest.raises(StreamFailed) as failed:
                async for _ in chunked:
                    pass
            assert failed.value.code == ErrorCode.INVALID
            with pytest.raises(InvalidRequest) as invalid:
                await pool.open_stream("bad", StreamParams(reasoning_parser="no-such-parser"))
            assert "no-such-parser" in invalid.value.message
            await pool.close()
            with pytest.raises(PoolError) as closed:
                await pool.encode("x")
            assert closed.value.code == ErrorCode.CLOSED
    uvloop.run(main())



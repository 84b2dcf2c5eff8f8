"""The public surface's docstrings show exact outputs; this runs them (Tokenizer, TextStream, the parsers,
the chunk writer, the pool, the endpoint rules)."""

import doctest
import importlib

import pytest

MODULES = ["tokworker.tokenizer.tokenizer", "tokworker.stream.state", "tokworker.parsers.tools",
           "tokworker.parsers.tools.core.callids", "tokworker.parsers.tools.core.literals",
           "tokworker.parsers.tools.core.textargs", "tokworker.parsers.tools.core.base",
           "tokworker.parsers.tools.core.shapes",
           "tokworker.parsers.reasoning", "tokworker.parsers.template_parsers", "tokworker.wire", "tokworker.wire.chat",
           "tokworker.wire.common", "tokworker.wire.completions", "tokworker.wire.responses", "tokworker.wire.anthropic",
           "tokworker.wire.derender",
           "tokworker.frontend.client", "tokworker.protocol.endpoints", "tokworker.protocol.packed_ids",
           "tokworker.templates.owned",
           "tokworker.worker.endpoint_lock", "tokworker.worker.preflight", "tests.cuts",
           "tokworker.worker.sessions", "tokworker.worker.sinks", "tokworker.worker.request_socket", "tokworker.api.errors",
           "tokworker.api.bodies",
           "tokworker.api.plan",
           "tokworker.api.fanout", "tokworker.api.sent_bytes",
           "tokworker.api.errorlog", "tokworker.api.workers_at", "tokworker.api.access", "tokworker.api.metrics",
           "tokworker.engines.base", "tokworker.api.limits", "tokworker.engines.http",
           "tokworker.engines.options", "tokworker.api.options", "tokworker.cli"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

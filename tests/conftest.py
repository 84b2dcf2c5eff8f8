"""Suite-wide hypothesis settings: a failing property stops at its first counterexample and shrinks it,
without the explain phase (it traces every line, many times slower on a template render). Hunting for more
distinct failures after the first, as hypothesis does by default, can outlast pytest-timeout, whose thread
method then ends the whole run without a report. A test marked long is marked slow as well. And the fixtures
several modules share."""

import pytest
from hypothesis import Phase, settings

from tokworker import Tokenizer
from tokworker.worker.options import DEFAULT_MODEL_DIR

settings.register_profile("tokworker", report_multiple_bugs=False,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])
settings.load_profile("tokworker")


@pytest.hookimpl(tryfirst=True)         # before `-m` deselects by the markers
def pytest_collection_modifyitems(items):
    """A test marked long is slow too: the inner loop (`-m "not slow"`) leaves it out with the rest."""
    for item in items:
        if item.get_closest_marker("long") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def tokenizer():
    """The bundled tokenizer with its chat template, in this process: the oracle that replies of a pool
    spawned on DEFAULT_MODEL_DIR are checked against. One per module, so no module sees another's warm cache."""
    return Tokenizer.from_dir(DEFAULT_MODEL_DIR)


@pytest.fixture(scope="module")
def smollm2_server():
    """One llama-server on SmolLM2 per test module (4 slots of 1,024 tokens), on a free 127.0.0.1 port;
    the module's tests skip when llama-server is not built or SmolLM2 is not installed."""
    from tests.llama_cpp import serve, smollm2
    with serve(smollm2(), "-c", "4096", "-np", "4") as server:
        yield server

"""No silent ChatML: a model folder without a chat template is refused with an error naming the remedy (as
transformers and vLLM refuse it); ChatML only when asked for by name; the operator's template through
`apply_chat_template(chat_template=...)`, `TokenizerPool.spawn(chat_template=...)` and
`tokworker serve --chat-template FILE`."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import uvloop

from tokworker import Tokenizer
from tests.daemons import wait_held
from tokworker.frontend import InvalidRequest, PoolError, TokenizerPool
from tokworker.protocol.messages import ErrorCode
from tokworker.templates import CHATML_TEMPLATE, MissingTemplateError, TemplateError

REPO = Path(__file__).resolve().parent.parent
DEFAULT = REPO / "tokworker" / "data" / "default"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
OPERATOR_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}"


@pytest.fixture(scope="module")
def bare_dir():
    """The bundled tokenizer without its template: what a base model's folder looks like."""
    directory = Path(tempfile.mkdtemp(prefix="tokworker-bare-"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEFAULT / name, directory / name)
    yield directory
    shutil.rmtree(directory)


@pytest.fixture(scope="module")
def template_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("template") / "operator.jinja"
    path.write_text(OPERATOR_TEMPLATE)
    return path


def _assert_names_the_remedy(message: str):
    for remedy in ("--chat-template", "chat_template=", "'chatml'"):
        assert remedy in message, message


def test_a_model_without_a_template_is_refused_like_transformers_refuses_it(bare_dir):
    tokenizer = Tokenizer.from_dir(bare_dir)
    assert tokenizer.chat_template is None
    for tokenize in (False, True):
        with pytest.raises(MissingTemplateError) as refused:
            tokenizer.apply_chat_template(MESSAGES, tokenize=tokenize)
        assert isinstance(refused.value, TemplateError) and isinstance(refused.value, ValueError)
        _assert_names_the_remedy(str(refused.value))
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(str(bare_dir))
    with pytest.raises(ValueError, match="chat_template is not set"):
        reference.apply_chat_template(MESSAGES, tokenize=False)


def test_chatml_by_name_and_the_callers_own_template(bare_dir):
    tokenizer = Tokenizer.from_dir(bare_dir)
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, chat_template="chatml", add_generation_prompt=True)
    assert text == tokenizer.apply_chat_template(MESSAGES, tokenize=False, chat_template=CHATML_TEMPLATE,
                                                 add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there")
    assert tokenizer.apply_chat_template(MESSAGES, chat_template="chatml") == tokenizer.encode(
        tokenizer.apply_chat_template(MESSAGES, tokenize=False, chat_template="chatml"))
    own = tokenizer.apply_chat_template(MESSAGES, tokenize=False, chat_template=OPERATOR_TEMPLATE,
                                        allow_untrusted_template=True)
    assert own == "<|im_start|>system: Be brief.<|im_end|><|im_start|>user: Hello there<|im_end|>"


def test_a_model_template_named_chatml_wins_over_the_builtin():
    class Named:
        chat_template = {"default": "D", "chatml": "mine {{ messages[0].content }}"}
        config = None

        @staticmethod
        def encode(text):
            return [len(text)]

    from tokworker.templates.apply import apply_chat_template
    assert apply_chat_template(Named(), MESSAGES, tokenize=False, chat_template="chatml") == "mine Be brief."


def test_the_bundled_tokenizer_ships_chatml_as_its_own_template():
    """`tokworker demo` renders on it; transformers reads the same template from the folder."""
    assert Tokenizer.from_dir(DEFAULT).chat_template == CHATML_TEMPLATE
    transformers = pytest.importorskip("transformers")
    assert transformers.AutoTokenizer.from_pretrained(str(DEFAULT)).chat_template == CHATML_TEMPLATE


def test_the_pool_refuses_then_uses_the_operators_template(bare_dir, template_file):
    tokenizer = Tokenizer.from_dir(bare_dir)

    async def main():
        async with await TokenizerPool.spawn(bare_dir, workers=1) as pool:
            with pytest.raises(InvalidRequest) as refused:
                await pool.render(MESSAGES)
            assert refused.value.code == "template_error"
            _assert_names_the_remedy(str(refused.value))
            prompt = await pool.render(MESSAGES, chat_template="chatml", return_text=True)
            assert prompt.ids == tokenizer.apply_chat_template(MESSAGES, chat_template="chatml",
                                                               add_generation_prompt=True)
        for given in (str(template_file), OPERATOR_TEMPLATE):
            async with await TokenizerPool.spawn(bare_dir, workers=1, chat_template=given) as pool:
                prompt = await pool.render(MESSAGES, return_text=True)
                assert prompt.text == "<|im_start|>system: Be brief.<|im_end|><|im_start|>user: Hello there<|im_end|>"
                assert prompt.ids == tokenizer.apply_chat_template(MESSAGES, chat_template=OPERATOR_TEMPLATE,
                                                                   allow_untrusted_template=True)
        async with await TokenizerPool.spawn(bare_dir, workers=1, chat_template="chatml") as pool:
            prompt = await pool.render(MESSAGES, return_text=True)
            assert prompt.text == tokenizer.apply_chat_template(MESSAGES, tokenize=False, chat_template="chatml",
                                                                add_generation_prompt=True)

    uvloop.run(main())


def _serve(*args):
    return subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_serve_chat_template_flag(bare_dir, template_file):
    missing = _serve("--model-dir", str(bare_dir), "--chat-template", str(template_file) + ".absent")
    assert missing.wait(60) == 2
    assert "is not a file" in missing.stderr.read()
    run_dir = Path(tempfile.mkdtemp(prefix="tokworker-template-"))
    base = f"ipc://{run_dir}/sock"
    daemon = _serve("--model-dir", str(bare_dir), "--bind", base, "--chat-template", str(template_file))
    wait_held(daemon, base)

    async def use():
        async with await TokenizerPool.connect(base, connect_timeout=30) as pool:
            return (await pool.render(MESSAGES, return_text=True)).text

    try:
        text = uvloop.run(use())
    finally:
        daemon.send_signal(signal.SIGTERM)
        status = daemon.wait(20)
    assert status == 0, daemon.stderr.read()
    assert text == "<|im_start|>system: Be brief.<|im_end|><|im_start|>user: Hello there<|im_end|>"
    shutil.rmtree(run_dir, ignore_errors=True)


def test_a_pool_never_mixes_workers_that_render_with_different_templates(template_file):
    """The operator's template is part of the model fingerprint (by its text: a file and the same text
    given inline are one template), so a pool refuses a worker that would render other prompts."""
    async def main():
        plain = await TokenizerPool.spawn(DEFAULT, workers=1)
        templated = await TokenizerPool.spawn(DEFAULT, workers=1, chat_template=str(template_file))
        twin = await TokenizerPool.spawn(DEFAULT, workers=1, chat_template=OPERATOR_TEMPLATE)
        try:
            endpoint = {name: pool.links[0].endpoint for name, pool in
                        (("plain", plain), ("templated", templated), ("twin", twin))}
            fingerprints = {name: pool.info.model_fingerprint for name, pool in
                            (("plain", plain), ("templated", templated), ("twin", twin))}
            prompts = {name: (await pool.render(MESSAGES, return_text=True)).text for name, pool in
                       (("plain", plain), ("templated", templated))}
            mixed = [await _connect_or_refusal([endpoint[name] for name in pair])
                     for pair in (("plain", "templated"), ("twin", "plain"))]
            async with await TokenizerPool.connect([endpoint["templated"], endpoint["twin"]], discover=False) as joined:
                assert len(joined.links) == 2
                both = [reply.text for reply in await asyncio.gather(
                    *(joined.render(MESSAGES, return_text=True) for _ in range(6)))]
            return fingerprints, prompts, mixed, both
        finally:
            for pool in (plain, templated, twin):
                await pool.close()

    fingerprints, prompts, mixed, both = uvloop.run(main())
    assert mixed == [ErrorCode.MODEL_MISMATCH] * 2
    assert prompts["plain"] != prompts["templated"]           # they do render differently
    assert prompts["templated"] == "<|im_start|>system: Be brief.<|im_end|><|im_start|>user: Hello there<|im_end|>"
    assert fingerprints["templated"] == fingerprints["twin"] != fingerprints["plain"]
    assert set(both) == {prompts["templated"]}


async def _connect_or_refusal(endpoints) -> str:
    try:
        pool = await TokenizerPool.connect(endpoints, discover=False)
    except PoolError as error:
        return error.code
    await pool.close()
    return "connected"

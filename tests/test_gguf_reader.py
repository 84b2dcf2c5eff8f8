"""The GGUF metadata reader: the same values as the `gguf` package reads from the real SmolLM2 file, and a
truncated or hostile file (mutated by hypothesis, or written to lie) refused with MalformedVocabulary
naming the problem: never another exception, never an allocation the file's bytes do not back."""

from __future__ import annotations

import struct
import tracemalloc
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.llama_cpp import smollm2
from tokworker import Tokenizer
from tokworker.tokenizer.errors import MalformedVocabulary, UnsupportedComponent
from tokworker.tokenizer.gguf_reader import read_metadata

gguf = pytest.importorskip("gguf")


@pytest.mark.slow  # a sweep of several seconds
def test_reads_what_the_gguf_package_reads():
    path = smollm2()
    ours = read_metadata(path)
    theirs = gguf.GGUFReader(str(path))
    for key, field in theirs.fields.items():
        if not key.startswith(("general.", "tokenizer.")):
            continue
        value = field.contents()
        mine = ours.pop(key)
        assert (list(mine) if isinstance(mine, array) else mine) == value, key
    assert ours == {}


def small_gguf(tmp_path) -> bytes:
    """A real little vocabulary file: a byte-level BPE with merges, types, ids, flags and a template."""
    writer = gguf.GGUFWriter(str(tmp_path / "small.gguf"), arch="llama")
    tokens = ["<|endoftext|>", "<|im_start|>", "a", "b", "ab", "Ġ", "Ġab"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 1, 1, 1, 1, 1])
    writer.add_token_merges(["a b", "Ġ ab"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_chat_template("{{ messages[0]['content'] }}")
    writer.add_array("general.tags", [[1, 2], [3]])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return (tmp_path / "small.gguf").read_bytes()


def test_the_small_file_loads(tmp_path):
    small_gguf(tmp_path)
    tok = Tokenizer.from_gguf(tmp_path / "small.gguf")
    assert tok.encode("ab ab<|endoftext|>", add_special_tokens=True) == [1, 4, 6, 0]
    assert tok.chat_template == "{{ messages[0]['content'] }}"


def _header(count: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, count)


def _text(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


LIES = {
    "empty": (b"", "shorter than its header"),
    "wrong magic": (b"GGML" + bytes(40), "is not a GGUF file"),
    "version 1": (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "GGUF version 1"),
    "2**60 keys": (_header(1 << 60), "claims 1152921504606846976 keys"),
    "a key past the end": (_header(1) + struct.pack("<Q", 1 << 40) + bytes(16), "is truncated"),
    "unknown type": (_header(1) + _text(b"k") + struct.pack("<I", 99) + bytes(8), "unknown type code 99"),
    "2**62 strings": (_header(1) + _text(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 62),
                      "claims 4611686018427387904 elements"),
    "deep arrays": (_header(1) + _text(b"k") + struct.pack("<II", 9, 9) + struct.pack("<Q", 1) + struct.pack("<I", 9)
                    + struct.pack("<Q", 1) + struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 1) + bytes(8),
                    "nests arrays deeper"),
    "three arrays deep": (_header(1) + _text(b"k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 2
                          + struct.pack("<IQ", 4, 1) + bytes(4), "nests arrays deeper"),
    "three arrays deep, used": (_header(1) + _text(b"tokenizer.ggml.tokens") + struct.pack("<I", 9)
                                + struct.pack("<IQ", 9, 1) * 2 + struct.pack("<IQ", 4, 1) + bytes(4), "nests arrays deeper"),
    "a key twice": (_header(2) + (_text(b"k") + struct.pack("<II", 4, 7)) * 2, "holds key 'k' twice"),
    "not UTF-8": (_header(1) + _text(b"tokenizer.x") + struct.pack("<I", 8) + _text(b"\xff\xfe"), "not UTF-8"),
    "a string cut short": (_header(1) + _text(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + _text(b"ab")
                           + struct.pack("<Q", 5) + b"c", "ends inside string 1 of 2"),
}


@pytest.mark.parametrize("name", sorted(LIES))
def test_a_lying_file_is_refused_by_name(tmp_path, name):
    data, problem = LIES[name]
    (tmp_path / "x.gguf").write_bytes(data)
    with pytest.raises(MalformedVocabulary, match=problem):
        read_metadata(tmp_path / "x.gguf")


@pytest.mark.parametrize("name", ["deep arrays", "three arrays deep", "three arrays deep, used"])
def test_the_loader_walks_over_deep_arrays_no_deeper(tmp_path, name):
    """The loader's reader walks over what it does not use: it refuses the same nesting while walking."""
    data, problem = LIES[name]
    (tmp_path / "x.gguf").write_bytes(data)
    with pytest.raises(MalformedVocabulary, match=problem):
        Tokenizer.from_gguf(tmp_path / "x.gguf")


def test_a_file_with_the_wrong_kinds_is_refused_by_name(tmp_path):
    data = _header(3) + _text(b"tokenizer.ggml.model") + struct.pack("<I", 8) + _text(b"gpt2") \
        + _text(b"tokenizer.ggml.tokens") + struct.pack("<I", 4) + struct.pack("<I", 7) \
        + _text(b"tokenizer.ggml.pre") + struct.pack("<I", 8) + _text(b"smollm")
    (tmp_path / "x.gguf").write_bytes(data)
    with pytest.raises(MalformedVocabulary, match="tokenizer.ggml.tokens must be an array of strings"):
        Tokenizer.from_gguf(tmp_path / "x.gguf")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return small_gguf(tmp_path_factory.mktemp("gguf"))


def _u64_offsets(data: bytes) -> list[int]:
    """Where the small file keeps its counts and lengths: every 8-byte little-endian value below 64."""
    return [i for i in range(8, len(data) - 7) if struct.unpack_from("<Q", data, i)[0] < 64]


mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=8)),
    st.tuples(st.just("huge"), st.integers(0, 1 << 16), st.sampled_from([1 << 31, 1 << 40, 1 << 62, (1 << 64) - 1])),
)


@pytest.mark.slow  # a sweep of several seconds
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=mutation)
def test_mutated_headers_are_refused_cleanly(original, tmp_path, change):
    data = bytearray(original)
    kind = change[0]
    if kind == "truncate":
        data = data[:change[1] % (len(data) + 1)]
    elif kind == "flip":
        for at, value in change[1]:
            data[at % len(data)] = value
    else:
        offsets = _u64_offsets(original)
        at = offsets[change[1] % len(offsets)]
        data[at:at + 8] = struct.pack("<Q", change[2])
    path = tmp_path / "mutated.gguf"
    path.write_bytes(bytes(data))
    tracemalloc.start()
    try:
        Tokenizer.from_gguf(path)
    except (MalformedVocabulary, UnsupportedComponent):
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes allocated reading a {len(data)}-byte file"


def _spm_file(extra: bytes, extra_keys: int) -> bytes:
    """A tiny SentencePiece-style vocabulary followed by `extra_keys` hostile key-value pairs."""
    tokens = [b"<unk>", b"<s>", b"</s>", b"a", b"b", b"ab", "▁".encode()]
    return (_header(2 + extra_keys) + _text(b"tokenizer.ggml.model") + struct.pack("<I", 8) + _text(b"llama")
            + _text(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(map(_text, tokens))
            + extra)


def _empty_strings(key: bytes, count: int) -> bytes:
    return _text(key) + struct.pack("<IIQ", 9, 8, count) + struct.pack("<Q", 0) * count


def _empty_arrays(key: bytes, count: int) -> bytes:
    return _text(key) + struct.pack("<IIQ", 9, 9, count) + struct.pack("<IQ", 0, 0) * count


# The attacks of issue 29 scaled to 200k values: at 10M the loader used to peak at 2 GB (empty strings) and
# 1 GB (empty arrays); at 200k it allocated 17-38 MB, now 12-19 KB. An unused value is walked over; a used
# key of the wrong shape is named without being built.
HOSTILE_VALUES = {
    "empty strings under an unused key": (_empty_strings(b"x.junk", 200_000), None),
    "empty strings under an unused tokenizer key": (_empty_strings(b"tokenizer.junk", 200_000), None),
    "empty arrays under an unused key": (_empty_arrays(b"general.junk", 200_000), None),
    "empty arrays as the token types": (_empty_arrays(b"tokenizer.ggml.token_type", 200_000),
                                        "token_type must be an array of 7 numbers"),
    "empty arrays as the merges": (_empty_arrays(b"tokenizer.ggml.merges", 200_000), None),
    "empty arrays as a named template": (_empty_arrays(b"tokenizer.chat_template.x", 200_000),
                                         "tokenizer.chat_template.x must be a string, not array of array"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_VALUES))
def test_values_the_loader_does_not_use_cost_no_memory(tmp_path, name):
    extra, problem = HOSTILE_VALUES[name]
    (tmp_path / "plain.gguf").write_bytes(_spm_file(b"", 0))
    Tokenizer.from_gguf(tmp_path / "plain.gguf")          # the modules a first load imports are not counted
    path = tmp_path / "hostile.gguf"
    path.write_bytes(_spm_file(extra, 1))
    tracemalloc.start()
    try:
        if problem is None:
            assert Tokenizer.from_gguf(path).encode("ab") == [6, 5]
        else:
            with pytest.raises(MalformedVocabulary, match=problem):
                Tokenizer.from_gguf(path)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 256 << 10, f"{peak} bytes allocated reading a {path.stat().st_size}-byte file"


def test_an_interrupt_mid_read_comes_out_as_itself(tmp_path):
    """The load budget's watchdog interrupts a read wherever it is, with views into the mapped file alive in
    the interrupt's traceback: the map cannot close under them, and the interrupt must come out as itself
    (it came out as BufferError "cannot close exported pointers exist", so the refusal named no budget).
    A trace function raises where the watchdog would: inside the reader's take()."""
    import sys

    small_gguf(tmp_path)

    class Interrupt(Exception):
        pass

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "take":
            raise Interrupt
        return None

    sys.settrace(tracer)
    try:
        with pytest.raises(Interrupt):
            read_metadata(tmp_path / "small.gguf")
    finally:
        sys.settrace(None)
    assert read_metadata(tmp_path / "small.gguf")["tokenizer.chat_template"] == "{{ messages[0]['content'] }}"

"""`tokworker api`'s flags are made from the declarations of ApiOptions, ServerLimits (api/options.py) and
EngineLimits (engines/options.py): every described field is exactly one flag named after it, its default
is the Struct's, `--help` shows it, each list keeps its spelling (vllm serve's where it has one), and
building the command line imports no aiohttp."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tokworker.api.options import ApiOptions, ServerLimits
from tokworker.cli import _api_settings, _declared, _given, _parser
from tokworker.engines.options import EngineLimits

# Fields that are not flags of their own: the daemon's --drain-timeout sets the front door's too.
NOT_FLAGS = {ApiOptions: {"drain_timeout"}, ServerLimits: set(), EngineLimits: set()}


def _api() -> object:
    return _parser()._subparsers._group_actions[0].choices["api"]


def test_the_three_structs_are_declared():
    assert [(struct, prefix) for struct, prefix, *_ in _api_settings()] == \
        [(ApiOptions, ""), (ServerLimits, ""), (EngineLimits, "engine_")]


@pytest.mark.parametrize("struct, prefix", [(ApiOptions, ""), (ServerLimits, ""), (EngineLimits, "engine_")],
                         ids=["ApiOptions", "ServerLimits", "EngineLimits"])
def test_every_declared_option_is_exactly_one_flag(struct, prefix):
    fields = [field for field, *_ in _declared(struct)]
    assert set(fields) == set(struct.__struct_fields__) - NOT_FLAGS[struct]
    actions = _api()._actions
    for field, kind, *_ in _declared(struct):
        dest = prefix + field
        flag = "--" + dest.replace("_", "-")
        mine = [action for action in actions if action.dest == dest]
        assert len(mine) == 1, dest
        expected = [flag, "--no-" + flag[2:]] if kind is bool and getattr(struct(), field) else [flag]
        assert mine[0].option_strings == expected


def test_the_defaults_are_the_structs():
    args = _api().parse_args([])
    for struct, prefix, *_ in _api_settings():
        assert struct(**_given(args, struct, prefix)) == struct()
    assert args.direct_streaming is None            # not given: --workers-at can tell
    assert (args.header_timeout_s, args.engine_header_timeout_s, args.max_connections, args.engine_max_connections,
            args.max_request_bytes, args.allowed_origins, args.api_key) == (10.0, 60.0, None, 256, 32 << 20, ["*"], [])


def test_help_lists_every_flag_with_its_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")           # a flag's help unwrapped, on its line or the next
    lines = _api().format_help().splitlines()
    entries = {}                                    # the first flag of each entry: its whole text
    for line in lines:
        if line.startswith("  -"):
            entries[line.split()[0].rstrip(",")] = line
        elif line.startswith("    ") and entries:
            entries[list(entries)[-1]] += line
    shown = {"--max-request-bytes": "32 MiB", "--max-body-bytes-in-flight": "256 MiB", "--engine-error-bytes": "64 KiB",
             "--body-timeout-s": "60", "--health-interval": "1", "--allowed-origins": '["*"]',
             "--max-connections": "RLIMIT_NOFILE less", "--served-model-name": "the model folder",
             "--api-key": "VLLM_API_KEY's and TOKWORKER_API_KEY's"}
    for struct, prefix, title, _ in _api_settings():
        assert f"{title}:" in lines
        for field, kind, default, *_ in _declared(struct):
            flag = "--" + (prefix + field).replace("_", "-")
            line = entries[flag]
            if kind is not bool:
                assert "(default: " in line, line
            if flag in shown:
                assert f"(default: {shown[flag]}" in line, line


def test_each_flag_reads_as_before():
    args = _api().parse_args(["--served-model-name", "a", "b", "--api-key", "k1", "--api-key", "k2", "k3",
                              "--allowed-origins", '["https://app.example"]', "--no-direct-streaming",
                              "--metrics-open", "--max-connections", "64", "--engine-header-timeout-s", "2.5",
                              "--engine-max-connections", "8", "--derender-idle-s", "9", "--max-model-len", "4096"])
    api, server, engine = (_given(args, struct, prefix) for struct, prefix, *_ in _api_settings())
    assert (api["served_model_name"], api["api_key"], api["allowed_origins"], api["direct_streaming"],
            api["metrics_open"], api["derender_idle_s"], api["max_model_len"]) == \
        (["a", "b"], ["k1", "k2", "k3"], ["https://app.example"], False, True, 9.0, 4096)
    assert server["max_connections"] == 64 and engine["header_timeout_s"] == 2.5 and engine["max_connections"] == 8
    assert _given(_api().parse_args(["--direct-streaming"]), ApiOptions, "")["direct_streaming"] is True
    with pytest.raises(SystemExit):
        _api().parse_args(["--allowed-methods", "GET"])     # vllm serve's spelling: a JSON list


def test_the_command_line_imports_no_aiohttp():
    code = "import sys; from tokworker.cli import _parser; _parser().parse_args(['api']); print('aiohttp' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"

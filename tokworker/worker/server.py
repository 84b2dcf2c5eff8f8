"""The worker process: one loaded tokenizer and a ROUTER socket, one reply for every request.

Two threads: the lane (lane.py) owns the socket, decodes every message once and serves session requests
itself (streams, handshakes, stats: Worker's methods below); the main thread runs the stateless jobs the
lane hands it under the CPU budget. Whatever arrives, the client gets exactly one reply: the result or
an ErrorReply (malformed frames, unknown types, wrong fields, oversize or deeply nested payloads, pickles
all end there) and the loop goes on. ZeroMQ itself drops frames over MAXMSGSIZE, so clients keep their
own timeouts. Sessions and who owns them: sessions.py.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import logging
import os
import resource
import secrets
import select
import signal
import socket as socketlib
import sys
import threading
import time
from pathlib import Path

import msgspec
import zmq
from zmq.utils.garbage import gc as zero_copy

from tokworker.protocol.deltas import room
from tokworker.protocol.endpoints import requests_path, sinks_path
from tokworker.protocol.messages import (PROTOCOL_VERSION, CloseReply, CloseStreams, CodedError, Compile, Decode, Encode,
                                         EncodeRun, ErrorCode, Forward, ForwardReply, Guide, Hello, HelloReply, Limits,
                                         OpenReply, OpenStream, Render, RenderReply, StatsReply, Step, StepReply,
                                         decode_request)
from tokworker.templates.apply import compile_own_templates
from tokworker.templates.watchdog import WATCHDOG
from tokworker.worker.constraints import ConstraintCache
from tokworker.worker.defaults import default_parsers
from tokworker.worker.errors import error_of
from tokworker.worker.handlers import Handlers
from tokworker.worker.lane import HOUSEKEEPING_S, REPLY_QUEUE, SWITCH_S, Job, Lane, decode_error
from tokworker.worker.launcher import notify_ready
from tokworker.worker.limits import BudgetExceeded, CpuBackstop, CpuBudget, apply_memory_limit, disable_core_dumps
from tokworker.worker.options import GC_YOUNG, WorkerOptions
from tokworker.worker.replies import encode_reply
from tokworker.worker.security import check_bind, secure_server
from tokworker.worker.sessions import MAX_NAME, Sessions
from tokworker.worker.request_socket import RequestSockets
from tokworker.worker.sinks import SinkTable
from tokworker.worker.streams import StreamTable

log = logging.getLogger("tokworker.worker")

CUT_NOTICE_S = 3.0                 # how long a worker past its drain timeout waits to tell cut streams so
FAREWELL_MS = 500                  # how long a drained worker's last replies (its Draining notices) may take to leave

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "tekken.json")


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


class LoadBudgetExceeded(CodedError, ValueError):
    """A tokenizer that did not load within the load budget; `message` names the model and the budget."""


def load_within_budget(model_dir: str, chat_template: str | None, load_cpu_s: float, load_memory_mb: int):
    """load_tokenizer, stopped once it has used `load_cpu_s` of CPU time or grown resident memory by
    `load_memory_mb` (LoadBudgetExceeded): a hostile file must not take minutes or gigabytes of every
    process that opens it. What a corrupt file raises passes through."""
    def refuse(code: str, reason: str, cause: Exception):
        raise LoadBudgetExceeded(code, f"cannot serve {model_dir}: {reason}") from cause

    try:
        return WATCHDOG.run(lambda: load_tokenizer(model_dir, chat_template), load_cpu_s,
                            max_memory_growth=load_memory_mb << 20, what="loading its tokenizer")
    except TimeoutError as exc:     # the watchdog's verdict: CPU time (or the wall-clock ceiling far above it)
        refuse(ErrorCode.TIMEOUT, f"{exc} (--load-cpu {load_cpu_s:g})", exc)
    except MemoryError as exc:      # the watchdog's verdict, or an allocation past the address-space limit
        refuse(ErrorCode.OUT_OF_MEMORY, f"loading its tokenizer grew resident memory by more than {load_memory_mb} MB "
               f"(--load-memory-mb {load_memory_mb})" if str(exc) else
               "loading its tokenizer ran out of memory (--memory-limit-mb)", exc)


class Worker:
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.tokenizer = load_within_budget(options.model_dir, options.chat_template, options.load_cpu_s,
                                            options.load_memory_mb)
        self.fingerprint = model_fingerprint(options.model_dir, None if options.chat_template is None
                                             else self.tokenizer.chat_template)
        self.handlers = Handlers(self.tokenizer, options)
        compile_own_templates(self.tokenizer)        # at load, not inside the first render's budget
        self.constraints = ConstraintCache(self.tokenizer, options, self.fingerprint)
        implied_tool, implied_reasoning = default_parsers(options.tool_parser, options.reasoning_parser,
                                                          self.tokenizer.chat_template, log)
        self.streams = StreamTable(self.tokenizer, options.max_streams, options.stream_idle_s,
                                   options.tool_parser or implied_tool, options.reasoning_parser, options.budget_s,
                                   implied_reasoning, max_session_streams=options.max_session_streams)
        self.sessions = Sessions(options.max_sessions, self.streams.sessions)
        self.worker_id = f"{socketlib.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.started = time.monotonic()
        self.budget = CpuBudget()
        self.draining_until: float | None = None             # set by SIGTERM: the drain's deadline
        self.cut_at: float | None = None                     # when the streams left at that deadline were cut
        self.on_drain = None                                 # wakes the lane, which tells every client (serve)
        self.cpu = CpuBackstop(options.cpu_limit_s)
        self.request_sockets: RequestSockets | None = None  # local API processes' requests (serve)
        self.stateless = {Render: self.handlers.render, Encode: self.handlers.encode,
                          EncodeRun: self.handlers.encode_run, Decode: self.handlers.decode,
                          Compile: self.constraints.compile, Guide: self.constraints.guide}
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
            caps.extend(("sinks", "sink_groups", "whole_sinks"))   # it takes client sockets: direct responses
        if requests_path(self.options.bind) is not None:
            caps.append("request_socket")                           # it reads requests beside ZeroMQ
        if self.options.allow_request_templates:
            caps.append("request_templates")
        if importlib.util.find_spec("tokworker.constrain") is not None:
            caps.extend(("compile", "guide"))
        return caps

    @property
    def draining(self) -> bool:
        return self.draining_until is not None

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
        # a peer whose host died sends no FIN: ZeroMQ's heartbeats find it, and connections.py drops its streams
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(1, round(options.peer_timeout_s * 1000 / 3)))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1, round(options.peer_timeout_s * 1000)))
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
        path = requests_path(options.bind)
        if path is not None:
            self.request_sockets = RequestSockets(path, self.sessions, options.max_message_bytes + 8)
        zero_copy.start()       # pyzmq's thread for large replies: now, not at the first one under memory pressure
        notify_ready()
        parent = os.getppid()
        wake_read, wake_write = socketlib.socketpair()     # the lane's jobs and SIGTERM wake this thread at once
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        signal.set_wakeup_fd(wake_write.fileno())
        lane = Lane(self, sock, lambda: _wake(wake_write), stop)
        self.on_drain = lane.wake
        thread = threading.Thread(target=lane.run, name="session-lane", daemon=True)
        poller = select.poll()
        poller.register(wake_read, select.POLLIN)
        sys.setswitchinterval(SWITCH_S)                     # how long a step may wait behind a render
        # a render allocates thousands of young containers (the template's dicts and lists, match objects, the
        # ids' lists) that die with it: at the default threshold (700) the collector ran several times a
        # render, 3-6% of a 4k chat's CPU
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
        thread.start()
        try:
            while not stop[0] and thread.is_alive():
                woken = poller.poll(HOUSEKEEPING_S * 1000)
                if woken:
                    try:
                        wake_read.recv(4096)                # the lane's bytes and the signal's: a drain must not busy-poll
                    except BlockingIOError:
                        pass
                jobs = lane.jobs
                while jobs:
                    lane.give_back(self.run(jobs.popleft()))
                if self.draining and lane.announced and not lane.queued and self.drained():
                    break
                if not woken and os.getppid() != parent:
                    log.warning("parent process went away; worker exits")
                    break
        finally:
            stop[0] = True
            lane.wake()                                     # it sleeps until its next housekeeping otherwise
            thread.join()
            signal.set_wakeup_fd(-1)
            wake_read.close()
            wake_write.close()
            sock.close(linger=FAREWELL_MS if self.draining else 0)   # the notices go out even if nothing else is left
            if sinks is not None:
                sinks.close_all()
            if self.request_sockets is not None:
                self.request_sockets.close_all()
            if options.bind.startswith("ipc://"):
                Path(options.bind[len("ipc://"):]).unlink(missing_ok=True)
            if authenticator is not None:
                authenticator.stop()
            context.term()
            log.info("worker %s stopped after %d requests", self.worker_id, lane.requests)

    def drained(self) -> bool:
        """True once the drain is over: no stream open, and every stream cut at the drain timeout told so
        (or CUT_NOTICE_S passed). Read by the main thread; the lane does the cutting."""
        if self.streams.count == 0 and not self.streams.cut:
            log.info("drained: 0 stream(s) still open; worker exits")
            return True
        if self.cut_at is not None and time.monotonic() >= self.cut_at + CUT_NOTICE_S:
            log.info("worker exits: %d cut stream(s) were not stepped again", len(self.streams.cut))
            return True
        return False

    def begin_drain(self) -> None:
        """SIGTERM: new streams and stateless work get SHUTTING_DOWN; open streams are stepped until they
        end or the drain timeout passes, then the loop exits."""
        if self.draining_until is None:
            self.draining_until = time.monotonic() + self.options.drain_timeout_s
            log.info("draining %d open stream(s) for up to %.1f s", self.streams.count, self.options.drain_timeout_s)
            if self.on_drain is not None:
                self.on_drain()

    # ------------------------------------------------------------ stateless work: the main thread, under the budget
    def run(self, job: Job) -> Job:
        """Serve one stateless request: job.body is its reply, or job.error its (code, message)."""
        options = self.options
        if time.monotonic() - job.arrived > options.max_queue_wait_s:
            job.error = (ErrorCode.OVERLOADED, f"waited over {options.max_queue_wait_s} s in this worker's queue")
            return job
        try:
            msg = decode_request(job.message.buffer[8:])
        except (msgspec.DecodeError, ValueError, RecursionError, MemoryError) as exc:
            job.error = decode_error(exc)
            return job
        try:
            if type(msg) is Compile and self.constraints.prepare(msg):  # once, outside any request's budget
                freeze_heap()                                          # the trie lives as long as the process
            reply = self.budget.run(options.budget_s, self.stateless[type(msg)], msg)
            if type(msg) is Render and msg.open:
                job.opens = _opens_on(msg, reply) if not reply.runs else ()
                reply.opened = bool(job.opens)
                reply.text = reply.text if msg.return_text else None
            job.body = encode_reply(reply, options.max_message_bytes)
        except (Exception, BudgetExceeded) as exc:
            job.error = error_of(exc, options.budget_s)
            if job.error[0] == ErrorCode.INTERNAL:
                log.exception("request %d (%s) failed", job.request_id, type(msg).__name__)
        return job

    # ------------------------------------------------------------ session requests: the lane, no CPU budget
    def step(self, identity: bytes, msg: Step, size: int) -> StepReply:
        """`size`: the message's bytes. Every id takes at least one of them, so a message of at most max_ids
        bytes cannot carry too many and is not counted (the usual step: 256 streams' ids cost 6 us to count)."""
        options = self.options
        if len(msg.ids) + len(msg.finish) > options.max_batch:
            raise CodedError(ErrorCode.TOO_LARGE, f"step over {options.max_batch} streams")
        if size > options.max_ids:
            self._priced(sum(map(len, msg.ids.values())), "a step")
        return self.streams.step(self.sessions.session(identity), msg)

    def open_stream(self, identity: bytes, msg: OpenStream) -> OpenReply:
        if self.draining:
            raise CodedError(ErrorCode.SHUTTING_DOWN, "this worker is shutting down: send new work to another")
        if len(msg.stream_id) > MAX_NAME:
            raise CodedError(ErrorCode.INVALID, f"a stream id is at most {MAX_NAME} characters")
        self._priced(len(msg.prompt_ids or ()) + sum(map(len, msg.replay)), "an open (prompt and replay)")
        self.streams.open(self.sessions.session(identity), msg)
        return OpenReply(stream_id=msg.stream_id)

    def open_all(self, identity: bytes, opens: list[OpenStream]) -> None:
        """A render's streams (Render.open): all open, or none (the first failure is raised)."""
        opened = []
        try:
            for msg in opens:
                self.open_stream(identity, msg)
                opened.append(msg.stream_id)
        except BaseException:
            if opened:
                self.streams.close(self.sessions.session(identity), opened)
            raise

    def forward(self, identity: bytes, msg: Forward) -> ForwardReply:
        return ForwardReply(sse=self.streams.forward(self.sessions.session(identity), msg.stream_id))

    def close_streams(self, identity: bytes, msg: CloseStreams) -> CloseReply:
        return CloseReply(closed=self.streams.close(self.sessions.session(identity), msg.stream_ids, msg.error))

    def _priced(self, ids: int, what: str) -> None:
        """Opens and steps run on the lane, where nothing can stop them: their work is priced in ids before
        any is read (an open of 8M prompt ids, or a step of 4,096 streams x 4,000 ids, held a worker 3 s)."""
        if ids > self.options.max_ids:
            raise CodedError(ErrorCode.TOO_LARGE, f"{what} carries {ids} ids, over this worker's "
                                                  f"{self.options.max_ids} (--max-ids)")

    def hello(self, identity: bytes, msg: Hello, peer: str) -> HelloReply:
        if msg.version != PROTOCOL_VERSION:
            raise CodedError(ErrorCode.UNSUPPORTED_VERSION,
                             f"this worker speaks protocol {PROTOCOL_VERSION}, not {msg.version}")
        session = self.sessions.hello(identity, msg, peer)
        if msg.reset:
            self.streams.drop_session(session)
        if self.draining:                                   # answered at once: new work goes elsewhere
            return msgspec.structs.replace(self.hello_reply, draining=True)
        return self.hello_reply

    def housekeeping(self, idle: bool) -> None:
        """Every HOUSEKEEPING_S, on the lane: streams idle too long are dropped; with no request running,
        the CPU backstop is re-armed (it is there for a request stuck in C code: the lane's own idling must
        not add up to SIGXCPU)."""
        streams = self.streams
        streams.evict_idle()
        if self.draining and self.cut_at is None and time.monotonic() >= self.draining_until:
            log.info("drained: %d stream(s) still open; each is cut and told so at its next step", streams.count)
            streams.cut_all()
            self.cut_at = time.monotonic()
        if idle:
            self.cpu.arm()

    def stats(self, lane: Lane) -> StatsReply:
        return StatsReply(worker_id=self.worker_id, index=self.options.index, pool_size=self.options.pool_size,
                          pid=os.getpid(), model_fingerprint=self.fingerprint, uptime_s=time.monotonic() - self.started,
                          draining=self.draining, requests=lane.requests, errors=lane.errors,
                          streams_open=self.streams.count, streams_opened=self.streams.opened, queue_depth=lane.queued,
                          max_rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                          gc_frozen=gc.get_freeze_count(), errors_by_code=dict(lane.request_errors.by_code),
                          dropped=lane.dropped)


def _wake(sock: socketlib.socket) -> None:
    try:
        sock.send(b"\0")
    except BlockingIOError:                                 # its buffer is full of wakes already
        pass


def run_worker(options: WorkerOptions) -> int:
    """Process entry point: limits first, then load, then serve until SIGTERM (drain) or SIGQUIT (at once).
    SIGINT is ignored: a terminal's Ctrl-C reaches the whole process group, and the pool's owner (the
    daemon, the API process) decides what its workers do, through its launcher."""
    logging.basicConfig(level=options.log_level, format="%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s")
    stop = [False]
    worker = None

    def request_stop(signum, frame):
        """SIGTERM drains (once it serves); SIGQUIT, or SIGTERM while loading, stops at once."""
        if signum == signal.SIGTERM and worker is not None:
            worker.begin_drain()
        else:
            stop[0] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGQUIT, request_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    apply_memory_limit(options.memory_limit_mb)
    disable_core_dumps()
    worker = Worker(options)
    worker.serve(stop)
    return 0


def _opens_on(msg: Render, reply: RenderReply) -> list[OpenStream]:
    """A render's streams on its prompt, or none when the prompt leaves them no room in the context (the
    client then refuses the request in its own words): a max_tokens of None becomes what the context leaves."""
    opens = []
    for open_ in msg.open:
        params = open_.params
        limit = room(len(reply.ids), params.max_tokens, msg.max_model_len)
        if limit == 0:
            return []
        if limit != params.max_tokens:
            params = msgspec.structs.replace(params, max_tokens=limit)
        opens.append(msgspec.structs.replace(open_, params=params, prompt_ids=reply.ids, prompt_text=reply.text))
    return opens

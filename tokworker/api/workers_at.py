"""`tokworker api --workers-at ENDPOINT[,ENDPOINT...]`: the front door on running `tokworker serve` daemons
(this host's over ipc://, or others' over tcp:// with CURVE keys) in place of worker processes of its own.
Its flags and their checks, kept apart from run.py so that building the command line imports no aiohttp.

    workers_at = workers_at_from(args)      # None without --workers-at; a ValueError naming the problem
    await serve_http(workers_at or spawn, options, engine)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokworker.protocol.endpoints import ClientKeys

FRONT_DOOR_SETTINGS = {"drain_timeout_s"}   # worker settings `tokworker api` reads for itself too


@dataclass(frozen=True)
class WorkersAt:
    """Running `tokworker serve` daemons the front door uses in place of a pool of its own: each endpoint is
    a daemon's first worker (its handshake names the rest); tcp:// ones are reached with CURVE `keys` (a
    ClientKeys). A daemon unreachable for `connect_timeout` has its streams rebuilt on another
    (TokenizerPool.connect's failover)."""

    endpoints: tuple[str, ...]
    keys: ClientKeys | None = None
    connect_timeout: float = 10.0

    async def connect(self):
        from tokworker.frontend import TokenizerPool

        return await TokenizerPool.connect(list(self.endpoints), curve_keys=self.keys,
                                           connect_timeout=self.connect_timeout)


def add_workers_at_flags(api: argparse.ArgumentParser) -> None:
    """`tokworker api`'s flags for running daemons. Added after every other flag: it records the defaults of
    those only a pool of the front door's own reads, so that giving one beside --workers-at is refused."""
    from tokworker.worker.options import settings

    local = {"model_dir", "workers"} | {field for field, *_ in settings()} - FRONT_DOOR_SETTINGS
    api.set_defaults(local_pool_flags={action.dest: (action.option_strings[0], action.default)
                                       for action in api._actions if action.dest in local})
    daemons = api.add_argument_group("running daemons", "the front door on `tokworker serve` daemons (this host's "
                                                        "or others') in place of worker processes of its own")
    daemons.add_argument("--workers-at", metavar="ENDPOINT[,ENDPOINT...]",
                         help="the first worker of each daemon (its --bind: ipc:///path or tcp://host:port); the "
                              "daemons load the model and own the worker settings; streams of a daemon that stays "
                              "unreachable move to another")
    daemons.add_argument("--curve-keys", metavar="DIR", help="for tcp:// daemons: a key directory holding server.key "
                                                             "and this client's NAME.key_secret (`tokworker keys DIR "
                                                             "--client NAME`)")
    daemons.add_argument("--curve-client", default="client", metavar="NAME",
                         help="the client key pair of --curve-keys to use (default: client)")
    daemons.add_argument("--workers-connect-timeout", type=float, default=10.0, metavar="SECONDS",
                         help="seconds a daemon may stay unreachable before its streams move to another; also the "
                              "wait for each at start (default: 10)")


def workers_at_from(args: argparse.Namespace) -> WorkersAt | None:
    """The daemons `args` name (None without --workers-at), checked together before anything starts: a
    ValueError naming the problem otherwise.

    >>> workers_at_from(argparse.Namespace(workers_at="tcp://10.0.0.2:7000", curve_keys=None, curve_client="client",
    ...                                    workers_connect_timeout=10.0, direct_streaming=False, local_pool_flags={}))
    Traceback (most recent call last):
    ValueError: --workers-at tcp://10.0.0.2:7000 needs --curve-keys: a daemon serves tcp only with CurveZMQ keys
    """
    from tokworker.protocol.endpoints import ClientKeys, parse_endpoint

    if args.workers_at is None:
        if args.curve_keys is not None:
            raise ValueError("--curve-keys is for the daemons of --workers-at")
        return None
    endpoints = tuple(endpoint.strip() for endpoint in args.workers_at.split(",") if endpoint.strip())
    if not endpoints:
        raise ValueError("--workers-at needs at least one endpoint (ipc:///path or tcp://host:port)")
    remote = [endpoint for endpoint in endpoints if parse_endpoint(endpoint).scheme == "tcp"]
    if remote and args.curve_keys is None:
        raise ValueError(f"--workers-at {remote[0]} needs --curve-keys: a daemon serves tcp only with CurveZMQ keys")
    if remote and args.direct_streaming:
        raise ValueError(f"--direct-streaming hands a client's socket to its worker over a Unix socket, so it needs "
                         f"workers on this host: {remote[0]} is reached over tcp, where every stream is forwarded "
                         f"(leave out --direct-streaming)")
    given = [flag for dest, (flag, default) in args.local_pool_flags.items() if getattr(args, dest) != default]
    if given:
        raise ValueError(f"{', '.join(given)}: the daemons of --workers-at load the model and run the workers with "
                         f"their own settings: give these to their `tokworker serve` (name the model here with "
                         f"--served-model-name)")
    if not args.workers_connect_timeout > 0:
        raise ValueError(f"--workers-connect-timeout must be above 0, got {args.workers_connect_timeout}")
    try:
        keys = ClientKeys.from_dir(args.curve_keys, args.curve_client) if args.curve_keys is not None else None
    except OSError as exc:                   # a key file that is not there or not readable
        raise ValueError(f"--curve-keys {args.curve_keys} --curve-client {args.curve_client}: {exc}") from None
    return WorkersAt(endpoints, keys, args.workers_connect_timeout)

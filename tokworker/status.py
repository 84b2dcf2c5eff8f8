"""`tokworker status`: ask every worker of a running daemon for its health and counters (the Stats
request, over the same endpoint and CURVE keys as any client), and print them as a table, JSON lines or
Prometheus' text format. Exit status 0 when every worker serves, 1 when one is unreachable or draining."""

from __future__ import annotations

import asyncio

import msgspec

from tokworker.frontend import PoolError, TokenizerPool
from tokworker.protocol.endpoints import ClientKeys, worker_endpoints
from tokworker.protocol.messages import Stats, encode_message

# (metric, Prometheus type, help, StatsReply field or a function of it)
METRICS = [
    ("tokworker_up", "gauge", "1 when the worker answered", lambda s: 1 if s.get("up") else 0),
    ("tokworker_draining", "gauge", "1 while the worker drains after SIGTERM", lambda s: int(s.get("draining", 0))),
    ("tokworker_uptime_seconds", "gauge", "seconds since the worker process started", "uptime_s"),
    ("tokworker_requests_total", "counter", "requests handled (handshakes and these polls left out)", "requests"),
    ("tokworker_errors_total", "counter", "error replies sent, by code", None),
    ("tokworker_dropped_total", "counter", "messages lost unanswered: floods from clients that stopped reading",
     "dropped"),
    ("tokworker_streams_open", "gauge", "streams open now", "streams_open"),
    ("tokworker_streams_opened_total", "counter", "streams opened since start", "streams_opened"),
    ("tokworker_queue_depth", "gauge", "requests read ahead, waiting", "queue_depth"),
    ("tokworker_max_rss_bytes", "gauge", "peak resident memory", lambda s: s["max_rss_kb"] * 1024),
]


async def _one(endpoint: str, keys, timeout: float) -> dict:
    try:
        pool = await TokenizerPool.connect(endpoint, curve_keys=keys, discover=False, connect_timeout=timeout,
                                           request_timeout=timeout)
    except (PoolError, OSError) as exc:
        return {"endpoint": endpoint, "up": False, "error": str(exc)}
    try:
        reply = await pool.links[0].request(encode_message(Stats()))
        return {"endpoint": endpoint, "up": True, **msgspec.structs.asdict(reply)}
    except PoolError as exc:
        return {"endpoint": endpoint, "up": False, "error": str(exc)}
    finally:
        await pool.close()


async def collect(endpoint: str, curve_keys: str | None = None, timeout: float = 5.0) -> list[dict]:
    """The status of every worker of the daemon whose first worker is at `endpoint` (one dict each, in
    worker order; `up` False with an `error` for one that did not answer)."""
    keys = ClientKeys.from_dir(curve_keys) if curve_keys else None
    first = await _one(endpoint, keys, timeout)
    if not first["up"]:
        return [first]
    rest = await asyncio.gather(*(_one(ep, keys, timeout)
                                  for ep in worker_endpoints(endpoint, first["pool_size"])[1:]))
    return [first, *rest]


def healthy(workers: list[dict]) -> bool:
    return all(w["up"] and not w["draining"] for w in workers)


def table(workers: list[dict]) -> str:
    lines = [f"{'worker':>6}  {'state':<9} {'pid':>7} {'uptime':>9} {'requests':>9} {'errors':>7} {'dropped':>7} "
             f"{'streams':>8} {'queue':>6} {'rss MB':>7}  endpoint"]
    for i, w in enumerate(workers):
        if not w["up"]:
            lines.append(f"{i:>6}  {'down':<9} {'':>7} {'':>9} {'':>9} {'':>7} {'':>7} {'':>8} {'':>6} {'':>7}  "
                         f"{w['endpoint']}: {w['error']}")
            continue
        state = "draining" if w["draining"] else "serving"
        lines.append(f"{w['index']:>6}  {state:<9} {w['pid']:>7} {w['uptime_s']:>8.0f}s {w['requests']:>9} "
                     f"{w['errors']:>7} {w['dropped']:>7} {w['streams_open']:>8} {w['queue_depth']:>6} "
                     f"{w['max_rss_kb'] / 1024:>7.0f}  {w['endpoint']}")
        if w["errors_by_code"]:
            by_code = sorted(w["errors_by_code"].items())
            lines.append("        errors: " + ", ".join(f"{code} {n}" for code, n in by_code))
    return "\n".join(lines)


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus(workers: list[dict]) -> str:
    """Prometheus' text exposition format, one series per worker (errors also by code)."""
    lines = []
    for name, kind, help_text, source in METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for i, w in enumerate(workers):
            if not w["up"] and name != "tokworker_up":
                continue
            labels = f'worker="{w.get("index", i)}",endpoint="{_label(w["endpoint"])}"'
            if name == "tokworker_errors_total":             # one series per code: errors is their sum
                lines += [f'{name}{{{labels},code="{_label(code)}"}} {n}' for code, n in
                          sorted(w["errors_by_code"].items())]
                continue
            lines.append(f"{name}{{{labels}}} {source(w) if callable(source) else w[source]}")
    return "\n".join(lines) + "\n"

"""The front door's Prometheus metrics: tokworker's own families (requests by route and status, time to first
token, time per output token, end-to-end latency, token counts, the pool's gauges) and, beside them, vLLM's
families under vLLM's names, labels and bucket bounds, so dashboards and alerts written for `vllm serve` read
this server unchanged. Fixed label sets and fixed buckets, so the memory is bounded whatever the traffic.

vLLM's families here, each labelled `model_name` (the first served name) and `engine` ("0"):
vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds (between two steps that brought a choice
output), vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds (the wait for a turn at the pool,
this server's queue), vllm:num_requests_running (requests at the engine), vllm:num_requests_waiting (requests
waiting for that turn), vllm:prompt_tokens_total, vllm:generation_tokens_total and
vllm:request_success_total{finished_reason} (stop, length, abort, error; one per choice, as vLLM counts each
of n).

    >>> m = Metrics("my-model")
    >>> m.request("/v1/chat/completions", 200)
    >>> m.latency.observe(0.2)
    >>> print("\\n".join(line for line in m.text().splitlines() if "e2e" in line and "le=\\"0.25\\"" in line))
    tokworker_e2e_request_latency_seconds_bucket{le="0.25"} 1
    >>> print("\\n".join(line for line in m.text().splitlines() if "e2e" in line and "le=\\"0.3\\"" in line))
    vllm:e2e_request_latency_seconds_bucket{model_name="my-model",engine="0",le="0.3"} 1
"""

from __future__ import annotations

import bisect
import time

import msgspec

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# vLLM's bounds (vllm/v1/metrics/loggers.py, PrometheusStatLogger)
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                    40.0, 80.0)
VLLM_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                        240.0, 480.0, 960.0, 1920.0, 7680.0)
FINISHED_REASONS = ("stop", "length", "abort", "error")


class Histogram:
    """`labels`: the rendered label pairs every line repeats (`model_name="m",engine="0"`); `vllm`: bounds
    written as prometheus_client writes them ("1.0", not "1")."""

    __slots__ = ("name", "help", "bounds", "counts", "sum", "count", "labels", "les")

    def __init__(self, name: str, help: str, bounds: tuple[float, ...], labels: str = "", vllm: bool = False):
        self.name, self.help, self.bounds, self.labels = name, help, bounds, labels
        self.les = [repr(float(b)) if vllm else f"{b:g}" for b in bounds]
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        prefix, own = (self.labels + ",", "{" + self.labels + "}") if self.labels else ("", "")
        running = 0
        for le, count in zip(self.les, self.counts):
            running += count
            out.append(f'{self.name}_bucket{{{prefix}le="{le}"}} {running}')
        out += [f'{self.name}_bucket{{{prefix}le="+Inf"}} {self.count}', f"{self.name}_sum{own} {self.sum:.6f}",
                f"{self.name}_count{own} {self.count}"]
        return out


class Both:
    """One observation into tokworker's histogram and vLLM's (the same measure, each family's buckets)."""

    __slots__ = ("ours", "vllm")

    def __init__(self, ours: Histogram, vllm: Histogram | None):
        self.ours, self.vllm = ours, vllm

    def observe(self, value: float) -> None:
        self.ours.observe(value)
        if self.vllm is not None:
            self.vllm.observe(value)


class Metrics:
    """Counters and histograms of one server; `gauges()` (set by the server) adds the pool's live figures and
    `running()` the requests at the engine. The serving loop calls `delivered` per update and `closed` per
    exchange; the prompt phase waits for its turn through `queued`."""

    def __init__(self, model_name: str = "default"):
        self.requests: dict[tuple[str, int], int] = {}      # (route, status): routes are the server's own
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.labels = f'model_name="{_escape(model_name)}",engine="0"'
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              VLLM_TTFT_BUCKETS, self.labels, vllm=True)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             VLLM_ITL_BUCKETS, self.labels, vllm=True)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             VLLM_REQUEST_BUCKETS, self.labels, vllm=True)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", VLLM_REQUEST_BUCKETS,
                               self.labels, vllm=True)
        self.first_token = Both(Histogram("tokworker_time_to_first_token_seconds", "Time from a request's arrival "
                                          "to its first generated token's text.", LATENCY_BUCKETS), self.ttft)
        self.per_token = Both(Histogram("tokworker_time_per_output_token_seconds",
                                        "Time per generated token after the first, per request.", TOKEN_BUCKETS), None)
        self.latency = Both(Histogram("tokworker_e2e_request_latency_seconds",
                                      "Time from a request's arrival to its last byte.", LATENCY_BUCKETS), self.e2e)
        self.success = dict.fromkeys(FINISHED_REASONS, 0)
        self.waiting = 0
        self.gauges = lambda: {}
        self.running = lambda: 0

    def request(self, route: str, status: int) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    async def queued(self, turn) -> None:
        """Await `turn` (the prompt phase's place at the pool), counted as waiting and timed as queue time."""
        began = time.perf_counter()
        self.waiting += 1
        try:
            await turn
        finally:
            self.waiting -= 1
        self.queue.observe(time.perf_counter() - began)

    def gap(self, seconds: float, _bisect=bisect.bisect_left) -> None:
        """One inter-token gap (a choice's engine output since its previous one): Histogram.observe inlined,
        as it runs once per stream per step."""
        itl = self.itl
        itl.counts[_bisect(itl.bounds, seconds)] += 1
        itl.sum += seconds
        itl.count += 1

    def closed(self, exchange) -> None:
        """An exchange ended: one request_success per choice, by its finish reason (a choice that never
        finished was aborted, or failed with the exchange)."""
        unfinished = "error" if exchange.error is not None else "abort"
        success = self.success
        for choice in exchange.choices:
            reason = choice.finish or unfinished
            success[reason if reason in success else "error"] += 1

    def text(self) -> str:
        out = ["# HELP tokworker_http_requests_total HTTP requests answered, by route and status.",
               "# TYPE tokworker_http_requests_total counter"]
        out += [f'tokworker_http_requests_total{{route="{route}",code="{status}"}} {count}'
                for (route, status), count in sorted(self.requests.items())]
        out += ["# HELP tokworker_prompt_tokens_total Prompt tokens of accepted requests.",
                "# TYPE tokworker_prompt_tokens_total counter", f"tokworker_prompt_tokens_total {self.prompt_tokens}",
                "# HELP tokworker_generation_tokens_total Tokens the engine generated for accepted requests.",
                "# TYPE tokworker_generation_tokens_total counter",
                f"tokworker_generation_tokens_total {self.generation_tokens}"]
        for histogram in (self.first_token.ours, self.per_token.ours, self.latency.ours):
            out += histogram.lines()
        for name, (help, value) in self.gauges().items():
            kind = "counter" if name.endswith("_total") else "gauge"
            out += [f"# HELP {name} {help}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(out + self._vllm()) + "\n"

    def _vllm(self) -> list[str]:
        labels = self.labels
        out = []
        for name, help, value in (("vllm:num_requests_running", "Number of requests in model execution batches.",
                                   self.running()),
                                  ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                   self.waiting)):
            out += [f"# HELP {name} {help}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
        for name, help, value in (("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
                                  ("vllm:generation_tokens", "Number of generation tokens processed.",
                                   self.generation_tokens)):
            out += [f"# HELP {name}_total {help}", f"# TYPE {name}_total counter",
                    f"{name}_total{{{labels}}} {float(value)}"]
        out += ["# HELP vllm:request_success_total Count of successfully processed requests.",
                "# TYPE vllm:request_success_total counter"]
        out += [f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {float(count)}'
                for reason, count in self.success.items()]
        for histogram in (self.ttft, self.itl, self.e2e, self.queue):
            out += histogram.lines()
        return out


def _escape(value: str) -> str:
    """A label value as Prometheus' text format writes it.

    >>> _escape('a"b\\\\c')
    'a\\\\"b\\\\\\\\c'
    """
    return msgspec.json.encode(value).decode()[1:-1]

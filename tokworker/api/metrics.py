"""The front door's own Prometheus metrics: requests by route and status, time to first token, time per
output token, end-to-end latency, token counts. Fixed label sets and fixed buckets, so the memory is bounded
whatever the traffic.

    >>> m = Metrics()
    >>> m.request("/v1/chat/completions", 200)
    >>> m.latency.observe(0.2)
    >>> print("\\n".join(line for line in m.text().splitlines() if "e2e" in line and "le=\\"0.25\\"" in line))
    tokworker_e2e_request_latency_seconds_bucket{le="0.25"} 1
"""

from __future__ import annotations

import bisect

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    __slots__ = ("name", "help", "bounds", "counts", "sum", "count")

    def __init__(self, name: str, help: str, bounds: tuple[float, ...]):
        self.name, self.help, self.bounds = name, help, bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, count in zip(self.bounds, self.counts):
            running += count
            out.append(f'{self.name}_bucket{{le="{bound:g}"}} {running}')
        out += [f'{self.name}_bucket{{le="+Inf"}} {self.count}', f"{self.name}_sum {self.sum:.6f}",
                f"{self.name}_count {self.count}"]
        return out


class Metrics:
    """Counters and histograms of one server; `gauges()` (set by the server) adds the pool's live figures."""

    def __init__(self):
        self.requests: dict[tuple[str, int], int] = {}      # (route, status): routes are the server's own
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.first_token = Histogram("tokworker_time_to_first_token_seconds",
                                     "Time from a request's arrival to its first generated token's text.", LATENCY_BUCKETS)
        self.per_token = Histogram("tokworker_time_per_output_token_seconds",
                                   "Time per generated token after the first, per request.", TOKEN_BUCKETS)
        self.latency = Histogram("tokworker_e2e_request_latency_seconds",
                                 "Time from a request's arrival to its last byte.", LATENCY_BUCKETS)
        self.gauges = lambda: {}

    def request(self, route: str, status: int) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

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
        for histogram in (self.first_token, self.per_token, self.latency):
            out += histogram.lines()
        for name, (help, value) in self.gauges().items():
            out += [f"# HELP {name} {help}", f"# TYPE {name} gauge", f"{name} {value}"]
        return "\n".join(out) + "\n"

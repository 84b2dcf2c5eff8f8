"""/metrics read with vLLM's names: the front door (a real pool, the replay engine, the real `openai` SDK) writes
vLLM's metric families, types, labels and histogram bounds beside tokworker's own, and their values follow
what was served (choices by finish reason, tokens, one time-to-first-token and one queue time per request,
inter-token latencies). The expected families are vLLM's own, read from its source. /metrics is open with
metrics_open while the API routes need the key. Covers tokworker.api.metrics."""

from __future__ import annotations

import re

import openai
import pytest
import requests

from api_server import running
from tokworker.api.options import ApiOptions

pytestmark = pytest.mark.slow  # the front door on worker processes

MODEL = "tokworker-test"
KEY = "sk-metrics"
# vLLM's own families (vllm-project/vllm, vllm/v1/metrics/loggers.py, PrometheusStatLogger.__init__: each
# Gauge/Counter/Histogram's name and buckets; labelnames ["model_name", "engine"], request_success adds
# "finished_reason"; prometheus_client writes a Counter named X as X_total).
REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0]
VLLM_FAMILIES = {
    "vllm:num_requests_running": ("gauge", None),
    "vllm:num_requests_waiting": ("gauge", None),
    "vllm:prompt_tokens_total": ("counter", None),
    "vllm:generation_tokens_total": ("counter", None),
    "vllm:request_success_total": ("counter", None),
    "vllm:time_to_first_token_seconds": ("histogram", [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                                       0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                                                       640.0, 2560.0]),
    "vllm:inter_token_latency_seconds": ("histogram", [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                                       0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]),
    "vllm:e2e_request_latency_seconds": ("histogram", REQUEST_LATENCY),
    "vllm:request_queue_time_seconds": ("histogram", REQUEST_LATENCY),
}
FINISHED_REASONS = {"stop", "length", "abort", "error"}       # vLLM's FinishReason values as label text
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict, float]]]:
    """Prometheus text: each family's TYPE, and every sample (name, labels, value)."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            name, labels, value = SAMPLE.match(line).groups()
            samples.append((name, dict(LABEL.findall(labels or "")), float(value)))
    return types, samples


def value(samples, name: str, **labels) -> float:
    (found,) = [v for n, ls, v in samples if n == name and all(ls.get(k) == w for k, w in labels.items())]
    return found


@pytest.fixture(scope="module")
def server():
    with running(options=ApiOptions(served_model_name=[MODEL], api_key=[KEY], metrics_open=True)) as server:
        yield server


def test_vllms_families_with_vllms_names_labels_and_bounds(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    two = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi scenario:plain"}],
                                         max_tokens=4, n=2)
    whole = client.completions.create(model=MODEL, prompt="Once", max_tokens=400)       # the script's end: stop
    assert [c.finish_reason for c in two.choices] == ["length", "length"] and whole.choices[0].finish_reason == "stop"
    with requests.post(server.url + "/v1/chat/completions", stream=True, timeout=30,
                       headers={"Authorization": f"Bearer {KEY}"},
                       json={"model": MODEL, "stream": True, "messages": [
                           {"role": "user", "content": "scenario:long"}]}) as response:
        lines = response.iter_lines()
        for _ in range(4):
            next(lines)                                  # the client goes away mid-stream: an abort
    server.settled(2.0)
    assert requests.get(server.url + "/v1/models", timeout=10).status_code == 401
    metrics = requests.get(server.url + "/metrics", timeout=10)       # open: metrics_open
    assert metrics.status_code == 200
    types, samples = parse(metrics.text)
    ours = {"model_name": MODEL, "engine": "0"}
    for name, (kind, bounds) in VLLM_FAMILIES.items():
        assert types[name] == kind, name
        family = [(n, ls) for n, ls, _ in samples if n == name or n.startswith(name + "_")]
        assert family and all({k: ls[k] for k in ours} == ours for _, ls in family), name
        if bounds is not None:
            les = [ls["le"] for n, ls in family if n == name + "_bucket"]
            assert [float(le) for le in les[:-1]] == bounds and les[-1] == "+Inf", name
    reasons = {ls["finished_reason"]: v for n, ls, v in samples if n == "vllm:request_success_total"}
    assert set(reasons) == FINISHED_REASONS
    assert reasons == {"length": 2.0, "stop": 1.0, "abort": 1.0, "error": 0.0}
    assert value(samples, "vllm:prompt_tokens_total") >= two.usage.prompt_tokens + whole.usage.prompt_tokens
    assert value(samples, "vllm:generation_tokens_total") > 8 + whole.usage.completion_tokens    # + the aborted
    assert value(samples, "vllm:prompt_tokens_total") == value(samples, "tokworker_prompt_tokens_total")
    assert value(samples, "vllm:time_to_first_token_seconds_count") == 3        # one per request
    assert value(samples, "vllm:request_queue_time_seconds_count") == 3
    assert value(samples, "vllm:e2e_request_latency_seconds_count") == 3
    # between two steps of a choice: at least the steps of the completion after its first
    assert value(samples, "vllm:inter_token_latency_seconds_count") >= whole.usage.completion_tokens - 1
    assert value(samples, "vllm:num_requests_running") == 0 and value(samples, "vllm:num_requests_waiting") == 0
    assert types["tokworker_time_to_first_token_seconds"] == "histogram"      # tokworker's own, beside them
    assert value(samples, "tokworker_time_to_first_token_seconds_count") == 3

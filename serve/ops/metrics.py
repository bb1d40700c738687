"""Prometheus metrics of the service (one registry, exposed at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from agent.trajectory import Step

REGISTRY = CollectorRegistry()
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)

TASKS = Counter(
    "uis1_tasks_total", "Tasks by status (submitted, then how they ended).", ["status"], registry=REGISTRY
)
QUEUE_DEPTH = Gauge("uis1_queue_depth", "Tasks waiting for a device.", registry=REGISTRY)
RUNNING = Gauge("uis1_tasks_running", "Episodes running now.", registry=REGISTRY)
STEP_SECONDS = Histogram(
    "uis1_step_seconds",
    "Step latency by phase: policy, device, service overhead.",
    ["phase"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
STEPS = Counter("uis1_steps_total", "Steps by who chose the action.", ["source"], registry=REGISTRY)
PARSE_ERRORS = Counter(
    "uis1_parse_errors_total", "Responses that did not parse, by reason.", ["reason"], registry=REGISTRY
)
POLICY_RETRIES = Counter(
    "uis1_policy_retries_total",
    "Policy requests sent again after a connection error, 429 or 5xx.",
    registry=REGISTRY,
)
DEVICES = Gauge("uis1_devices", "Devices in the pool by state.", ["state"], registry=REGISTRY)
MODEL = Info("uis1_model", "The model version that serves by default.", registry=REGISTRY)
HTTP_REQUESTS = Counter(
    "uis1_http_requests_total", "API requests by route and status.", ["route", "status"], registry=REGISTRY
)


def observe_step(step: Step) -> None:
    STEPS.labels(source=step.source.value).inc()
    if step.parse_error is not None:
        PARSE_ERRORS.labels(reason=step.parse_error.reason.value).inc()
    policy_s = step.timings.policy_s or 0.0
    device_s = step.timings.device_s or 0.0
    STEP_SECONDS.labels(phase="policy").observe(policy_s)
    STEP_SECONDS.labels(phase="device").observe(device_s)
    if step.started_at and step.ended_at:
        total = (step.ended_at - step.started_at).total_seconds()
        STEP_SECONDS.labels(phase="overhead").observe(max(0.0, total - policy_s - device_s))

"""Utilization of a run from Ray's own Prometheus metrics, sampled into a DataFrame on the driver.

With ``ray[default]`` every node's dashboard agent serves Prometheus text at
``http://<NodeManagerAddress>:<MetricsExportPort>/metrics`` (both in ``ray.nodes()``): CPU,
memory, object store, GPUs, and Ray Train's ``ray_train_*`` metrics (on by default).
``sample_metrics`` scrapes it once a second while a fit runs, so the lesson needs no Prometheus.
The endpoint is outside the dashboard's token check: with token authentication on (2.59+) it
still answers without a token (checked live in ``tests/integration/test_session_live.py``).
How fresh the numbers are is Ray's choice: node figures every 5 s (``REPORTER_UPDATE_INTERVAL_MS``),
other processes' every 10 s (``metrics_report_interval_ms``), so a 1 s sampler sees steps.
"""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from course_utils.internals.periodic import every

# Prometheus name -> (the course's name, factor to the course's unit). Per-GPU metrics get the
# GPU's index appended ("gpu 0 %").
NODE_METRICS: dict[str, tuple[str, float]] = {
    "ray_node_cpu_utilization": ("cpu %", 1.0),
    "ray_node_mem_used": ("memory used GB", 1e-9),
    "ray_node_mem_total": ("memory total GB", 1e-9),
    "ray_object_store_used_memory": ("object store used MB", 1e-6),
    "ray_node_gpus_utilization": ("gpu %", 1.0),
    "ray_node_gram_used": ("gpu memory used MB", 1.0),  # Ray reports GPU memory in MB
}
TRAIN_PREFIX = "ray_train_"
# Ready when both reporters have landed: the agent's node report (CPU, memory) and the raylet's
# object-store figure, which reach the endpoint separately and, under load, seconds apart.
READY_METRICS = ("ray_node_cpu_utilization", "ray_object_store_used_memory")
COLUMNS = ["time", "node", "metric", "value"]


class MetricsUnavailable(RuntimeError):
    """A node's metrics endpoint cannot be reached or serves no node metrics."""


@dataclass(frozen=True)
class Endpoint:
    """One alive node's Prometheus endpoint."""

    node_id: str
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"

    @property
    def node(self) -> str:
        """A short name for plots: the node's address and the start of its id."""
        return f"{self.address} {self.node_id[:6]}"


def endpoints(nodes: Iterable[dict[str, Any]] | None = None) -> list[Endpoint]:
    """Every alive node's metrics endpoint, from ``ray.nodes()`` (or the given node entries)."""
    if nodes is None:
        import ray

        nodes = ray.nodes()
    found = []
    for node in nodes:
        if node.get("Alive") and node.get("MetricsExportPort"):
            found.append(Endpoint(node["NodeID"], node["NodeManagerAddress"], int(node["MetricsExportPort"])))
    return found


def fetch(endpoint: Endpoint, timeout_s: float = 3.0) -> str:
    """The endpoint's Prometheus text; ``MetricsUnavailable`` in plain words when it cannot answer."""
    try:
        with urllib.request.urlopen(endpoint.url, timeout=timeout_s) as response:
            return response.read().decode()
    except (OSError, urllib.error.URLError) as error:
        raise MetricsUnavailable(
            f"Cannot read node {endpoint.node}'s metrics at {endpoint.url} ({error}). Ray serves them from "
            "each node's dashboard agent (needs ray[default]); on a cluster the driver must reach every node's "
            "MetricsExportPort."
        ) from error


def _wanted(name: str, train: bool) -> bool:
    return name in NODE_METRICS or (train and name.startswith(TRAIN_PREFIX))


def _filter(text: str, train: bool) -> str:
    """Only the lines of the metrics we keep: parsing all ~1,500 lines every second costs CPU the fit needs."""
    keep = []
    for line in text.splitlines():
        if line.startswith("# "):
            parts = line.split(" ", 3)
            if len(parts) > 2 and _wanted(parts[2], train):
                keep.append(line)
        elif line and _wanted(line.split("{", 1)[0].split(" ", 1)[0], train):
            keep.append(line)
    return "\n".join(keep) + "\n"


def _train_name(name: str, labels: dict[str, str]) -> str:
    """A ``ray_train_*`` series' name with the label that tells its series apart (rank or state)."""
    if "ray_train_worker_world_rank" in labels:
        return f"{name}[rank {labels['ray_train_worker_world_rank']}]"
    if "ray_train_controller_state" in labels:
        return f"{name}[{labels['ray_train_controller_state']}]"
    return name


def parse(
    text: str, node: str, at: float, train: bool = True, run_name: str | None = None
) -> list[dict[str, Any]]:
    """Rows (time, node, metric, value) from one scrape of one node's Prometheus text: node metrics
    in the course's names and units, ``ray_train_*`` (of run ``run_name``) with rank or state in brackets."""
    from prometheus_client.parser import text_string_to_metric_families

    rows = []
    for family in text_string_to_metric_families(_filter(text, train)):
        for sample in family.samples:
            if sample.name in NODE_METRICS:
                metric, factor = NODE_METRICS[sample.name]
                if "GpuIndex" in sample.labels:
                    metric = metric.replace("gpu", f"gpu {sample.labels['GpuIndex']}", 1)
                rows.append({"time": at, "node": node, "metric": metric, "value": sample.value * factor})
            elif sample.name.startswith(TRAIN_PREFIX):
                if run_name is not None and sample.labels.get("ray_train_run_name") != run_name:
                    continue
                metric = _train_name(sample.name, sample.labels)
                rows.append({"time": at, "node": node, "metric": metric, "value": sample.value})
    return rows


def wait_until_ready(timeout_s: float = 20.0, every_s: float = 0.25) -> list[Endpoint]:
    """Every alive node's endpoint once each serves its node figures (CPU and object store), which
    may take a while after ``ray.init``; ``MetricsUnavailable`` with the last reason after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = endpoints()
        reason = "no alive node reports a MetricsExportPort"
        try:
            for endpoint in found:
                text = fetch(endpoint)
                missing = [name for name in READY_METRICS if name not in text]
                if missing:
                    reason = (
                        f"node {endpoint.node} serves metrics but no node figures yet ({', '.join(missing)})"
                    )
                    break
            else:
                if found:
                    return found
        except MetricsUnavailable as error:
            reason = str(error)
        if time.monotonic() > deadline:
            raise MetricsUnavailable(f"Metrics not ready after {timeout_s:g} s: {reason}")
        time.sleep(every_s)


@dataclass
class Samples:
    """What ``sample_metrics`` collected: ``frame`` (time, node, metric, value), its window and any
    problems. ``skipped`` is the one-line reason when nothing could be sampled."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    scrapes: int = 0
    started_at: float | None = None
    stopped_at: float | None = None
    skipped: str | None = None

    @property
    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=COLUMNS)

    def describe(self) -> str:
        if self.skipped:
            return f"utilization not sampled: {self.skipped}"
        frame = self.frame
        seconds = (self.stopped_at or 0) - (self.started_at or 0)
        train = sorted({m.split("[")[0] for m in frame["metric"] if m.startswith(TRAIN_PREFIX)})
        return (
            f"{self.scrapes} scrapes of {frame['node'].nunique()} node(s) over {seconds:.0f} s: "
            f"{frame['metric'].nunique()} series; Ray Train metrics: {', '.join(train) or 'none'}"
            + (f"; {len(self.errors)} failed scrape(s), first: {self.errors[0]}" if self.errors else "")
        )


def _sample_once(samples: Samples, train: bool, run_name: str | None) -> None:
    at = time.time()
    for endpoint in endpoints():  # again every time: nodes can join or leave during a fit
        try:
            text = fetch(endpoint)
        except MetricsUnavailable as error:
            samples.errors.append(str(error))
            continue
        samples.rows.extend(parse(text, endpoint.node, at, train, run_name))
    samples.scrapes += 1


@contextlib.contextmanager
def sample_metrics(
    every_s: float = 1.0,
    train: bool = True,
    run_name: str | None = None,
    ready_timeout_s: float = 20.0,
    required: bool = False,
) -> Iterator[Samples]:
    """``with sample_metrics() as samples: result = trainer.fit()`` samples every node while it runs.

    A driver thread scrapes every alive node every ``every_s`` seconds into ``samples.frame``. When
    the endpoints cannot be reached the block still runs (the fit matters more) and ``samples.skipped``
    says why, unless ``required=True`` (``MetricsUnavailable``).
    """
    samples = Samples()
    try:
        wait_until_ready(ready_timeout_s)
    except MetricsUnavailable as error:
        if required:
            raise
        samples.skipped = str(error)
        yield samples
        return

    def step() -> None:
        try:
            _sample_once(samples, train, run_name)
        except Exception as error:  # a GCS hiccup in ray.nodes(): keep sampling, say so afterwards
            samples.errors.append(f"{type(error).__name__}: {error}")

    samples.started_at = time.time()
    try:
        with every(step, every_s, "metrics-sampler"):
            yield samples
    finally:
        samples.stopped_at = time.time()

"""course_utils.internals.metrics against a recorded response: one real scrape of a local Ray 2.58 node's
metrics endpoint (``data/metrics_fit.txt.gz``, taken during a 2-worker fit with
RAY_TRAIN_METRICS_ENABLED=1), served from a loopback HTTP server, so no Ray is started."""

from __future__ import annotations

import gzip
import http.server
import socket
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from course_utils.core import plots
from course_utils.internals import metrics  # noqa: E402

RECORDED = Path(__file__).parent / "data" / "metrics_fit.txt.gz"


@pytest.fixture(scope="module")
def recorded() -> str:
    return gzip.decompress(RECORDED.read_bytes()).decode()


def _serve(body: str):
    """A loopback server answering every GET with ``body``; returns (server, port)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


@pytest.fixture
def endpoint(recorded, monkeypatch):
    server, port = _serve(recorded)
    found = metrics.Endpoint("a086b13ad6c4d6d97a0dfd49", "127.0.0.1", port)
    monkeypatch.setattr(metrics, "endpoints", lambda nodes=None: [found])
    yield found
    server.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_endpoints_from_ray_nodes_entries_skip_dead_nodes():
    nodes = [
        {"NodeID": "aaa111", "NodeManagerAddress": "10.0.0.1", "MetricsExportPort": 41523, "Alive": True},
        {"NodeID": "bbb222", "NodeManagerAddress": "10.0.0.2", "MetricsExportPort": 41000, "Alive": False},
    ]
    (only,) = metrics.endpoints(nodes)
    assert only.url == "http://10.0.0.1:41523/metrics" and only.node == "10.0.0.1 aaa111"


def test_parse_recorded_response(recorded):
    frame = pd.DataFrame(metrics.parse(recorded, "n1", 100.0), columns=metrics.COLUMNS)
    values = dict(zip(frame["metric"], frame["value"], strict=False))
    # The figures in the recorded text, in the course's units.
    assert values["cpu %"] == pytest.approx(93.8)
    assert values["memory used GB"] == pytest.approx(4.432334848)
    assert values["memory total GB"] == pytest.approx(25.276063744)
    assert values["object store used MB"] == pytest.approx(0.001473)
    assert values["ray_train_report_total_blocked_time_s[rank 1]"] == pytest.approx(0.240663566)
    assert values["ray_train_worker_group_start_total_time_s"] == pytest.approx(10.0168664)
    assert values["ray_train_controller_state[RUNNING]"] == 1.0
    assert values["ray_train_controller_state[SCHEDULING]"] == 0.0
    assert set(frame["node"]) == {"n1"} and set(frame["time"]) == {100.0}
    # Everything else in the ~1,500 lines (grpc histograms, task counts ...) is left out.
    assert not any(m.startswith(("ray_grpc", "ray_tasks", "python_gc")) for m in frame["metric"])
    assert not any(m.startswith("gpu") for m in frame["metric"]), "this node has no GPU"


def test_parse_without_train_metrics_and_for_another_run(recorded):
    node_only = {r["metric"] for r in metrics.parse(recorded, "n1", 0.0, train=False)}
    assert "cpu %" in node_only and not any(m.startswith("ray_train_") for m in node_only)
    other_run = {r["metric"] for r in metrics.parse(recorded, "n1", 0.0, run_name="not-this-run")}
    assert "cpu %" in other_run and not any(m.startswith("ray_train_") for m in other_run)
    this_run = {r["metric"] for r in metrics.parse(recorded, "n1", 0.0, run_name="metrics-probe-1")}
    assert "ray_train_report_total_blocked_time_s[rank 0]" in this_run


def test_parse_names_each_gpu():
    # Ray's GPU gauges carry GpuIndex / GpuDeviceName (reporter_agent.py); no GPU here to record one.
    text = (
        "# TYPE ray_node_gpus_utilization gauge\n"
        'ray_node_gpus_utilization{GpuDeviceName="NVIDIA L4",GpuIndex="0",ip="10.0.0.1"} 87.0\n'
        'ray_node_gpus_utilization{GpuDeviceName="NVIDIA L4",GpuIndex="1",ip="10.0.0.1"} 12.0\n'
        "# TYPE ray_node_gram_used gauge\n"
        'ray_node_gram_used{GpuDeviceName="NVIDIA L4",GpuIndex="0",ip="10.0.0.1"} 5120.0\n'
    )
    values = {r["metric"]: r["value"] for r in metrics.parse(text, "n1", 0.0)}
    assert values == {"gpu 0 %": 87.0, "gpu 1 %": 12.0, "gpu 0 memory used MB": 5120.0}


def test_fetch_unreachable_endpoint_says_what_to_check():
    unreachable = metrics.Endpoint("deadbeef", "127.0.0.1", _free_port())
    with pytest.raises(metrics.MetricsUnavailable) as error:
        metrics.fetch(unreachable, timeout_s=1)
    assert unreachable.url in str(error.value) and "MetricsExportPort" in str(error.value)


def test_sampler_collects_a_time_series(endpoint):
    with metrics.sample_metrics(every_s=0.05, ready_timeout_s=5) as samples:
        time.sleep(0.4)
    frame = samples.frame
    assert samples.skipped is None and not samples.errors
    assert samples.scrapes >= 3 and frame["time"].nunique() == samples.scrapes
    assert samples.started_at <= frame["time"].min() and frame["time"].max() <= samples.stopped_at
    assert set(frame["node"]) == {endpoint.node}
    assert "ray_train_report_total_blocked_time_s" in samples.describe()


def test_sampler_skips_with_a_reason_or_raises_when_required(monkeypatch):
    down = metrics.Endpoint("deadbeef", "127.0.0.1", _free_port())
    monkeypatch.setattr(metrics, "endpoints", lambda nodes=None: [down])
    with metrics.sample_metrics(ready_timeout_s=0.3) as samples:
        ran = True
    assert ran and samples.skipped and samples.frame.empty
    assert samples.describe().startswith("utilization not sampled: Metrics not ready after 0.3 s")
    with pytest.raises(metrics.MetricsUnavailable):
        with metrics.sample_metrics(ready_timeout_s=0.3, required=True):
            pass


def _not_ready_reason(monkeypatch, body: str) -> str:
    """What wait_until_ready raises with for one node whose endpoint serves ``body``."""
    server, port = _serve(body)
    try:
        monkeypatch.setattr(
            metrics, "endpoints", lambda nodes=None: [metrics.Endpoint("ab", "127.0.0.1", port)]
        )
        with pytest.raises(metrics.MetricsUnavailable) as error:
            metrics.wait_until_ready(timeout_s=0.3)
    finally:
        server.shutdown()
    return str(error.value)


def test_ready_waits_for_node_figures(monkeypatch):
    reason = _not_ready_reason(monkeypatch, "# TYPE ray_tasks gauge\nray_tasks 1.0\n")  # agent up, no report
    assert "no node figures yet" in reason


def test_ready_waits_for_the_raylets_object_store_figure_too(monkeypatch):
    # The agent's node report has landed, the raylet's has not (CI saw this on a loaded machine).
    body = "# TYPE ray_node_cpu_utilization gauge\nray_node_cpu_utilization 3.0\n"
    assert "ray_object_store_used_memory" in _not_ready_reason(monkeypatch, body)


def test_utilization_plot_marks_epochs(recorded):
    rows = []
    for i, cpu in enumerate((50.0, 99.0, 97.0)):
        rows += [
            {**r, "value": cpu if r["metric"] == "cpu %" else r["value"]}
            for r in metrics.parse(recorded, "n1", 1000.0 + i)
        ]
    epochs = pd.DataFrame({"epoch": [0, 1], "reported_at": [1001.0, 1002.0]})
    fig = plots.utilization(pd.DataFrame(rows), epochs)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["CPU %", "memory used (GB)", "object store (MB)", "Ray Train (s)"]
    cpu_line = fig.axes[0].lines[0]
    assert list(cpu_line.get_xdata()) == [0.0, 1.0, 2.0] and list(cpu_line.get_ydata()) == [50.0, 99.0, 97.0]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["epoch 0", "epoch 1"]
    assert "RUNNING" in [t.get_text() for t in fig.axes[-1].texts]


def test_utilization_plot_without_samples():
    fig = plots.utilization(pd.DataFrame(columns=metrics.COLUMNS))
    assert [t.get_text() for t in fig.axes[0].texts] == ["no samples"]

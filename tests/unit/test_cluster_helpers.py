"""LocalCluster plumbing that needs no Ray: node addresses and stopping only its own processes."""

import os
import subprocess
import tempfile
import time
from pathlib import Path

from maintainer_tools import cluster


def test_nodes_get_their_own_loopback_addresses_that_ray_keeps():
    from ray._common.network_utils import is_localhost  # Ray swaps these for the machine's address

    ips = [cluster.node_ip(i) for i in range(3)]
    assert ips == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert not any(is_localhost(ip) for ip in ips)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def test_stop_ends_its_process_groups_and_removes_its_temp_dir():
    local = cluster.LocalCluster()
    local.temp_root = Path(tempfile.mkdtemp(prefix="rc-test-"))
    # A "node" with a child process, in its own group, as _ray_start makes them.
    node = subprocess.Popen(
        ["bash", "-c", "sleep 300 & echo $! ; wait"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    child = int(node.stdout.readline())
    bystander = subprocess.Popen(["sleep", "300"])  # not the cluster's: must survive
    local._processes.append(node)
    try:
        local.stop()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert node.poll() is not None and not _alive(child), "the node and its children ended"
        assert bystander.poll() is None, "a process outside the cluster's groups was left alone"
        assert not local.temp_root.exists()
        local.stop()  # idempotent
    finally:
        bystander.kill()
        bystander.wait()

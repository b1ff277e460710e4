"""Three hosts that share nothing but the network, on this machine: the course's multi-host tier.

A real cluster is several machines, each with its own address, disk, ``/tmp``, home folder and
``/dev/shm``. Here each host is a network namespace (``ip netns``) with its own address on a bridge,
joined by a veth pair; the worker hosts also get a mount namespace (``unshare -m``) with an empty
tmpfs over every folder the course or Ray writes locally: the course's default ``data/``, ``storage/``
and ``build/`` folders, ``/dev/shm``, their own ``HOME`` and ``TMPDIR`` (Ray's temp dir is
``$TMPDIR/ray``), and this machine's ``~/.ray`` (where the head's token lives). The checkout and
its ``.venv`` are the same on every host, as one image is on every node of a KubeRay cluster.

The head host runs Ray's head (fewer CPU slots than a fit needs, so fits, Ray Data tasks and pool
actors must go to the worker hosts), an S3 server (moto) at its own address, and the learner's
driver. Each worker host joins with ``ray start --address=<head>:6379`` and the token given to it
in ``RAY_AUTH_TOKEN``, as docs/hosting.md tells a host to give it. ``RECIPE`` holds those commands
and that environment: the tier runs them, and tests/unit/test_hosts_recipe.py holds docs/hosting.md
and deploy/kuberay.yaml to them.

Everything the tier starts runs in its own process group, and every process of a host lives in that
host's network namespace: ``stop()`` ends them by those, never with ``ray stop`` (it would end every
Ray on the machine). Needs root and ``ip``; ``unavailable()`` says in one line what is missing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maintainer_tools.checkout import REPO_ROOT

VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
RAY_PORT = 6379  # every host has its own ports: the documented default is free on the head host
S3_PORT = 9000  # moto's server on the head host, as a workshop's MinIO would be
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}
HEAD_SLOTS = 1  # fewer than any fit needs: training workers, Data tasks and pool actors go elsewhere
WORKER_SLOTS = 2


# The commands a host runs, with <placeholders>: docs/hosting.md shows exactly these (a unit test says so).
RECIPE = {
    "token": "ray get-auth-token --generate",
    "head": "RAY_AUTH_MODE=token ray start --head --port=6379 --node-ip-address=<head-ip> --num-cpus=<slots>",
    "worker": "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<token> ray start "
    "--address=<head-ip>:6379 --node-ip-address=<worker-ip> --num-cpus=<slots>",
    "learner": "RAY_ADDRESS=<head-ip>:6379 RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<token> "
    "COURSE_STORAGE=s3://<bucket>/<prefix> COURSE_S3_ENDPOINT=<endpoint> "
    "AWS_ACCESS_KEY_ID=<key> AWS_SECRET_ACCESS_KEY=<secret>",
}
# What the tier adds to a node's `ray start` that a host would not: stay in the foreground (the tier
# ends the node by its process group) and send no usage statistics (no internet here).
TIER_ONLY_FLAGS = ("--block", "--disable-usage-stats")


def recipe_command(kind: str, strict: bool = True, **values: str) -> tuple[dict[str, str], list[str]]:
    """``(environment, argv)`` of one of ``RECIPE``'s commands with its placeholders filled in
    (``head_ip="10.0.0.2"`` fills ``<head-ip>``); ``strict``: every one of them."""
    text = RECIPE[kind]
    for key, value in values.items():
        text = text.replace(f"<{key.replace('_', '-')}>", value)
    if strict and "<" in text:
        raise ValueError(f"RECIPE[{kind!r}] still has a placeholder: {text}")
    env, argv = {}, shlex.split(text)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        key, _, value = argv.pop(0).partition("=")
        env[key] = value
    return env, argv


def unavailable() -> str | None:
    """Why this machine cannot run the tier, in one line; None when it can."""
    if os.geteuid() != 0:
        return "the hosts tier needs root (network namespaces, mounts); CI runs as root"
    missing = [tool for tool in ("ip", "unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return f"the hosts tier needs {', '.join(missing)} (Debian: apt-get install iproute2 util-linux)"
    probe = f"rcprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


@dataclass
class Host:
    """One machine: a network namespace with its own address, and (worker hosts) its own disk."""

    name: str
    netns: str
    veth: str  # the bridge's end of its link: `ip link set <veth> down` cuts the host off
    ip: str
    root: Path  # the tier's folder: every host's TMPDIR is <root>/tmp (private on a worker host)
    private: bool  # a worker host: tmpfs over every folder the course or Ray writes locally
    process: subprocess.Popen | None = None
    log: Path | None = None
    node_id: str | None = None

    @property
    def home(self) -> Path:
        """A worker host's home (the head host's is this machine's)."""
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        """Every host's TMPDIR, at the same path as /tmp is on every machine: a node joining a cluster
        puts Ray's session folder at the head's path, so that path must be private on a worker host."""
        return self.root / "tmp"

    def private_folders(self) -> list[Path]:
        """Every folder this host keeps to itself (an empty tmpfs in its mount namespace)."""
        if not self.private:
            return []
        return [
            REPO_ROOT / "data",
            REPO_ROOT / "storage",
            REPO_ROOT / "build",
            Path("/dev/shm"),
            Path.home() / ".ray",  # this machine's home's Ray folder: the head's token is not here
            self.home,
            self.tmp,
        ]

    def env(self) -> dict[str, str]:
        """The environment of a process on this host: its own home and temp dir, no inherited Ray address."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "COURSE_"))}
        env["TMPDIR"] = str(self.tmp)  # Ray's temp dir is $TMPDIR/ray
        # The venv is the host's Python, as in a node's image: its `ray` is on PATH (py-spy, which reads a
        # hung rank's stack in a task on that rank's node, is found beside the task's Python).
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        if self.private:
            env["HOME"] = str(self.home)  # the head host is this machine, with its own home
        return env

    def argv(self, command: list[str]) -> list[str]:
        """``command`` as run on this host: in its network namespace and, for a worker host, with its
        private folders mounted first (one mount namespace for the command and all it starts)."""
        prefix = ["ip", "netns", "exec", self.netns]
        if not self.private:
            return [*prefix, *command]
        mounts = " && ".join(
            f"mount -t tmpfs -o mode=1777 tmpfs {shlex.quote(str(p))}" for p in self.private_folders()
        )
        return [
            *prefix,
            "unshare",
            "-m",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            f'{mounts} && exec "$@"',
            "sh",
            *command,
        ]

    def popen(self, command: list[str], env: dict[str, str], log: Path, **kwargs: Any) -> subprocess.Popen:
        """Start ``command`` on this host in its own process group, output to ``log``."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.argv(command),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO_ROOT,
                **kwargs,
            )

    def run(self, command: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
        """Run ``command`` on this host to the end (its own process group) and return its output."""
        return subprocess.run(
            self.argv(command),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
            cwd=REPO_ROOT,
        )

    def pids(self) -> list[int]:
        """Every process living on this host (its network namespace): what a power cut ends."""
        done = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        return [int(p) for p in done.stdout.split()]

    def kill_everything(self) -> int:
        """SIGKILL every process of this host at once, as a machine losing power; how many there were."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def cut_link(self) -> None:
        """Take this host off the network (its link goes down); its processes keep running."""
        _ip("link", "set", self.veth, "down")

    def files(self, folder: Path) -> list[str]:
        """Files under ``folder`` as this host sees it (its private mounts): what it keeps on its disk.

        Read from inside one of this host's processes, since a tmpfs is seen only in its mount namespace."""
        target = str(self.process.pid) if self.process and self.process.poll() is None else None
        if target is None:
            raise RuntimeError(f"{self.name} has no running process whose disk could be read")
        done = subprocess.run(
            ["nsenter", "-t", target, "-m", "find", str(folder), "-mindepth", "1", "-printf", "%P\n"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return sorted(done.stdout.split())


@dataclass
class Hosts:
    """A head host and ``workers`` worker hosts on one bridge; a context manager that always stops."""

    workers: int = 2
    head_slots: int = HEAD_SLOTS
    worker_slots: int = WORKER_SLOTS
    s3: bool = True
    hosts: list[Host] = field(default_factory=list)
    token: str = ""
    root: Path | None = None
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    subnet: str = ""
    s3_process: subprocess.Popen | None = None
    bucket: str = ""

    # ------------------------------------------------------------ the network
    def _network(self) -> None:
        used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        for third in range(200, 255):
            if f" 10.213.{third}." not in used:
                self.subnet = f"10.213.{third}"
                break
        else:
            raise RuntimeError("no free 10.213.x.0/24 for the hosts tier")
        bridge = f"rcbr{self.tag}"
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        names = ["head"] + [f"worker{i}" for i in range(1, self.workers + 1)]
        for index, name in enumerate(names):
            netns, veth = f"rc{self.tag}{name}", f"rv{self.tag}{index}"
            host = Host(name, netns, veth, f"{self.subnet}.{index + 2}", self.root, private=index > 0)
            self.hosts.append(host)
            _ip("netns", "add", netns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
            _ip("link", "set", veth, "master", bridge, "up")
            _ip("-n", netns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            _ip("-n", netns, "link", "set", "eth0", "up")
            _ip("-n", netns, "link", "set", "lo", "up")
            for folder in (host.home, host.tmp, *host.private_folders()):
                folder.mkdir(parents=True, exist_ok=True)  # on a worker host: mount points for its own tmpfs
        # Each host resolves every host's name and address, as on a cluster with DNS (`ip netns exec` mounts
        # /etc/netns/<netns>/hosts over /etc/hosts). Without it torch's c10d warns on every rank that "the
        # hostname of the client socket cannot be retrieved" (a host name that no DNS answers).
        # The hosts share this machine's host name (no UTS namespace): each resolves it to its own address.
        for host in self.hosts:
            folder = Path("/etc/netns") / host.netns
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(
                "127.0.0.1 localhost\n::1 localhost\n"
                + "".join(
                    f"{address} {h.name}{' ' + socket.gethostname() if h is host else ''}\n"
                    for h in self.hosts
                    for address in (h.ip, f"::ffff:{h.ip}")  # c10d's store sees its peers as IPv6-mapped
                )
            )

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def worker_hosts(self) -> list[Host]:
        return self.hosts[1:]

    @property
    def address(self) -> str:
        return f"{self.head.ip}:{RAY_PORT}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.head.ip}:{S3_PORT}"

    # ------------------------------------------------------------ start and stop
    def start(self, timeout_s: float = 240.0) -> Hosts:
        self.root = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))  # short: Ray's sockets live under it
        try:
            self._network()
            self._token()
            if self.s3:
                self._start_s3(timeout_s)
            self._start_node(self.head, "head", timeout_s)
            for host in self.worker_hosts:
                self._start_node(host, "worker", timeout_s)
            self.wait_for_nodes(len(self.hosts), timeout_s)
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def _token(self) -> None:
        """The head's token, made as docs/hosting.md tells the host (``~/.ray/auth_token`` on the head)."""
        env, argv = recipe_command("token")
        done = self.head.run(
            [str(VENV_BIN / argv[0]), *argv[1:]], {**os.environ, **env, "RAY_ADDRESS": ""}, 60
        )
        if done.returncode != 0:
            raise RuntimeError(f"`ray get-auth-token --generate` failed: {done.stderr.strip()[-500:]}")
        self.token = (Path.home() / ".ray" / "auth_token").read_text().strip()

    def _start_s3(self, timeout_s: float) -> None:
        log = self.root / "s3.log"
        self.s3_process = self.head.popen(
            [str(VENV_BIN / "moto_server"), "-H", self.head.ip, "-p", str(S3_PORT)], self.head.env(), log
        )
        deadline = time.monotonic() + timeout_s
        while (
            self.head.run(
                [
                    sys.executable,
                    "-c",
                    f"import urllib.request; urllib.request.urlopen('{self.s3_endpoint}/moto-api/')",
                ],
                self.head.env(),
                30,
            ).returncode
            != 0
        ):
            if self.s3_process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"moto_server did not start on {self.s3_endpoint}: {log.read_text()[-2000:]}"
                )
            time.sleep(0.5)

    def node_command(self, host: Host) -> tuple[dict[str, str], list[str]]:
        """The recipe's `ray start` for ``host``, with the tier's own flags after it."""
        if host is self.head:
            env, argv = recipe_command("head", head_ip=host.ip, slots=str(self.head_slots))
        else:
            env, argv = recipe_command(
                "worker",
                token=self.token,
                head_ip=self.head.ip,
                worker_ip=host.ip,
                slots=str(self.worker_slots),
            )
        return env, [str(VENV_BIN / argv[0]), *argv[1:], *TIER_ONLY_FLAGS]

    def _start_node(self, host: Host, kind: str, timeout_s: float) -> None:
        env, argv = self.node_command(host)
        host.log = self.root / f"{host.name}.log"
        host.process = host.popen(argv, {**host.env(), **env}, host.log)
        deadline = time.monotonic() + timeout_s
        while "Ray runtime started" not in host.log.read_text(errors="replace"):
            if host.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {host.name} host's Ray did not start:\n{host.log.read_text()[-3000:]}"
                )
            time.sleep(0.5)

    def learner_env(self, storage: str | None = None, **extra: str) -> dict[str, str]:
        """What a learner on the head host exports (RECIPE["learner"]), plus ``extra``."""
        env = {
            **self.head.env(),
            "RAY_ADDRESS": self.address,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "COURSE_PROFILE": "smoke",
        }
        if storage is None and self.s3:
            storage = f"s3://{self.bucket or self.make_bucket()}/course"
        if storage is not None:
            env["COURSE_STORAGE"] = storage
        if storage and storage.startswith("s3://"):
            env.update(S3_CREDENTIALS, COURSE_S3_ENDPOINT=self.s3_endpoint)
        env.update(extra)
        return env

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket on the head host's S3 server (as the workshop host does); its name."""
        name = name or f"course-{self.tag}"
        code = (
            "import pyarrow.fs as f; f.S3FileSystem(access_key='testing', secret_key='testing', region='us-east-1', "
            f"scheme='http', endpoint_override='{self.head.ip}:{S3_PORT}', allow_bucket_creation=True)"
            f".create_dir('{name}')"
        )
        done = self.head.run([sys.executable, "-c", code], self.head.env(), 60)
        if done.returncode != 0:
            raise RuntimeError(f"could not create bucket {name}: {done.stderr[-1000:]}")
        self.bucket = self.bucket or name
        return name

    def python(
        self,
        code: str,
        env: dict[str, str],
        timeout_s: float = 600,
        host: Host | None = None,
        args: list[str] = (),
    ) -> Any:
        """Run ``code`` (with ``args``) in this venv's Python on ``host`` (default the head); the JSON it
        printed on its ``RESULT `` line. A failure raises with its output and the nodes' logs."""
        done = (host or self.head).run([sys.executable, "-c", code, *args], env, timeout_s)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            raise AssertionError(
                f"driver on {(host or self.head).name} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n"
                f"{done.stderr[-6000:]}\n{self.logs()}"
            )
        return json.loads(lines[-1][len("RESULT ") :])

    def wait_for_nodes(self, count: int, timeout_s: float) -> None:
        code = (
            "import json, time, ray\n"
            "ray.init(logging_level='ERROR', log_to_driver=False)\n"
            f"deadline = time.monotonic() + {timeout_s}\n"
            f"while len([n for n in ray.nodes() if n['Alive']]) < {count} and time.monotonic() < deadline:\n"
            "    time.sleep(0.5)\n"
            "print('RESULT ' + json.dumps({n['NodeManagerAddress']: n['NodeID'] for n in ray.nodes() if n['Alive']}))\n"
        )
        nodes = self.python(code, self.learner_env(storage=None), timeout_s + 60)
        for host in self.hosts:
            host.node_id = nodes.get(host.ip)
        missing = [h.name for h in self.hosts if h.node_id is None]
        if missing:
            raise RuntimeError(f"hosts {missing} did not join the cluster at {self.address}:\n{self.logs()}")

    def bring_back(self, host: Host, timeout_s: float = 240.0) -> None:
        """A lost worker host back as a fresh machine: whatever of it still runs ends, its link comes up,
        its Ray starts again (an empty private disk) and joins; every host's node id is read again."""
        for _ in range(3):
            if not host.kill_everything():
                break
            time.sleep(0.5)
        if host.process is not None:
            host.process.wait(timeout=30)
        _ip("link", "set", host.veth, "up")
        self._start_node(host, "worker", timeout_s)
        self.wait_for_nodes(len(self.hosts), timeout_s)

    def host_of(self, node_id: str) -> str:
        """The host name of a Ray node id (``?`` for a node this tier did not start)."""
        return next((h.name for h in self.hosts if h.node_id == node_id), "?")

    def logs(self) -> str:
        if self.root is None:
            return ""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def stop(self, keep_logs: bool = False) -> None:
        """End every process of every host (by network namespace, then each started process group),
        remove the namespaces, the links and the bridge, then the tier's folder. Idempotent."""
        for host in reversed(self.hosts):
            for _ in range(3):
                if not host.kill_everything():
                    break
                time.sleep(0.5)
        for process in [self.s3_process, *(h.process for h in self.hosts)]:
            if process is not None and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=30)
        for host in self.hosts:
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / host.netns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", f"rcbr{self.tag}"], capture_output=True)
        self.hosts.clear()
        if self.root is not None and not keep_logs:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Hosts:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def url_ok(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5)
        return True
    except OSError:
        return False


# A worker host lost in the middle of a fit like lesson 04's: its mid-epoch loop on 2 workers, a checkpoint
# every 6 steps, FailureConfig(max_failures=1). A watcher thread in the driver waits for the first
# checkpoint, names the worker host a rank runs on ("LOSE <ip>": the caller then takes that host away) and
# notes when Ray declared its node dead. The fit goes on from the last checkpoint on the hosts left.
LOSSES = ("every process killed", "link cut")
LOST_HOST_FIT = """
import json, sys, threading, time
import ray
from ray.util.state import list_actors
from course_utils.core import checkpoints, config, session
from course_utils.lesson04 import resumable
from maintainer_tools import fits

name, head_ip = sys.argv[1:]
store = session.start_ray(verbose=False).storage
job = ray.get_runtime_context().get_job_id()
tiny = config.SMOKE.with_(epochs=2, train_size=2048, test_size=200, batch_size=64)
trainer = fits.make_trainer_mid_epoch(
    name, tiny, num_workers=2, max_failures=1, checkpoint_every=6, checkpoint_uploads=["sync"]
)
noticed = {}

def watch():
    while not store.reported_checkpoints(name):
        time.sleep(0.3)
    ranks = list_actors(filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE"),
                                 ("job_id", "=", job)], raise_on_missing_output=False)
    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    ip = next(ips[a.node_id] for a in ranks if ips[a.node_id] != head_ip)
    print(f"LOSE {ip}", flush=True)
    while any(n["Alive"] for n in ray.nodes() if n["NodeManagerAddress"] == ip):
        time.sleep(0.2)
    noticed["at"] = time.time()

threading.Thread(target=watch, daemon=True).start()
result = trainer.fit()
rows = checkpoints.load_state(result.checkpoint)["history"]  # what the loop reported, saved by Ray
print("RESULT " + json.dumps({
    "attempts": resumable.attempts(rows).to_dict("records"),
    "noticed_at": noticed.get("at"),
}))
"""


@dataclass
class LostHost:
    """What a fit saw when a worker host went: the host, seconds from the loss to Ray declaring its
    node dead and to the first training step after resuming, and the attempts."""

    host: str
    how: str
    noticed_s: float
    first_step_s: float
    attempts: list[dict[str, Any]]


def lose_a_worker_host(hosts: Hosts, how: str, name: str, timeout_s: float = 900.0) -> LostHost:
    """Run LOST_HOST_FIT from the head host and take away the worker host a rank runs on, ``how`` one
    of LOSSES; the host comes back afterwards (a fresh machine). Raises with the driver's output when
    the fit did not survive."""
    if how not in LOSSES:
        raise ValueError(f"how must be one of {LOSSES}, not {how!r}")
    driver = subprocess.Popen(
        hosts.head.argv([sys.executable, "-c", LOST_HOST_FIT, name, hosts.head.ip]),
        env=hosts.learner_env(COURSE_LEARNER="lost"),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert driver.stdout is not None
    lines: list[str] = []
    lost: Host | None = None
    lost_at = 0.0
    try:
        for line in driver.stdout:
            lines.append(line)
            if line.startswith("LOSE ") and lost is None:
                lost = next(h for h in hosts.worker_hosts if h.ip == line.split()[1])
                lost_at = time.time()
                if how == "link cut":
                    lost.cut_link()
                else:
                    lost.kill_everything()
        driver.wait(timeout=timeout_s)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        if lost is not None:
            hosts.bring_back(lost)
    out = "".join(lines)
    result = [line for line in lines if line.startswith("RESULT ")]
    if lost is None:
        raise RuntimeError(f"no rank ran on a worker host, so none was lost:\n{out[-3000:]}")
    if driver.returncode != 0 or not result:
        raise RuntimeError(f"the fit did not survive losing {lost.name} ({how}):\n{out[-5000:]}")
    got = json.loads(result[-1][len("RESULT ") :])
    return LostHost(
        host=lost.name,
        how=how,
        noticed_s=float("nan") if got["noticed_at"] is None else got["noticed_at"] - lost_at,
        first_step_s=got["attempts"][-1]["first_step_at"] - lost_at,
        attempts=got["attempts"],
    )


def submit_lesson02_job(hosts: Hosts, env: dict[str, str], timeout_s: float = 900.0):
    """docs/going-further.md's ``ray job submit`` of examples/lesson02_job.py from the head host, followed
    to its end (``ray job submit`` waits and prints the job's logs); the finished process and seconds."""
    job_env = {
        k: env[k] for k in ("COURSE_STORAGE", "COURSE_S3_ENDPOINT", "COURSE_PROFILE", "COURSE_LEARNER")
    }
    job_env.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
    command = [
        RAY,
        "job",
        "submit",
        "--address",
        "http://127.0.0.1:8265",
        "--working-dir",
        ".",
        "--runtime-env-json",
        json.dumps({"env_vars": job_env}),
        "--",
        "python",
        "examples/lesson02_job.py",
    ]
    started = time.monotonic()
    done = hosts.head.run(command, env, timeout_s)
    return done, time.monotonic() - started


# A driver on the head host whose COURSE_STORAGE is a folder on the head's disk only: it connects, then
# asks for the storage as lesson 02's RunConfig cell does; the course's sentence, and the seconds that took.
LOCAL_STORAGE_DRIVER = """
import json, time
from course_utils.core import session
from course_utils.core.config import CourseConfigError
store = session.start_ray(verbose=False).storage
started = time.perf_counter()
try:
    store.for_ray()
    said = None
except CourseConfigError as err:
    said = str(err)
print("RESULT " + json.dumps({"said": said, "seconds": time.perf_counter() - started}))
"""


def refuse_local_storage(hosts: Hosts) -> tuple[str | None, float]:
    """What ``ray_session.storage.for_ray()`` says to a driver on the head host with a local COURSE_STORAGE, and
    how long deciding took (a probe file and a zero-CPU task on each other node)."""
    folder = hosts.head.tmp / "local-storage"
    out = hosts.python(LOCAL_STORAGE_DRIVER, hosts.learner_env(storage=str(folder), COURSE_LEARNER="probe"))
    return out["said"], out["seconds"]

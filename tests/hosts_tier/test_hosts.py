"""The course on three hosts that share nothing but the network (``tests/hosts.py``).

The head host runs Ray's head with 1 CPU slot, an S3 server and the learner's driver; two worker
hosts (2 slots each, private disks) join with the token they were given. The lessons run from the
head host with ``COURSE_STORAGE`` on that S3 server, and Ray's state API (not printed text) says
where their ranks, read tasks and pool actors ran. A local ``COURSE_STORAGE`` stops lesson 02 at its
storage cell in one sentence; a folder every host sees (standing for an NFS mount) carries a fit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from course_utils.config import REPO_ROOT
from tests.hosts import VENV_BIN, Hosts, unavailable
from tests.notebook_runs import CLUSTER, HOSTS, LESSONS, S3

pytestmark = [pytest.mark.integration, pytest.mark.hosts, pytest.mark.path(HOSTS)]

# Lesson 04's faults travel through marker files on the driver's disk, which a worker host does not
# see; it is not run here yet (CONTRIBUTING.md, "The hosts tier").
TIER_LESSONS = [lesson for lesson in LESSONS if not lesson.name.startswith("04_")]
CELL_TIMEOUT_S = 900

# A lesson run on the head host: the tests' own runner (nbmake's), executed copy in build/tests/hosts.
RUN_LESSON = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from tests.notebook_runs import alarming_output, error_text, run_lesson
    result = run_lesson(Path(sys.argv[1]), "hosts", answered=False, timeout_s=int(sys.argv[2]))
    failed = result.error.failing_cell_index if result.error is not None else None
    print("RESULT " + json.dumps({
        "error": error_text(result)[-3000:],
        "failed_cell": failed,
        "failed_first_line": result.nb.cells[failed].source.splitlines()[0] if failed is not None else None,
        # a cluster the driver joined: the GCS's kill-race line reaches every driver (SHARED_CLUSTER_LINES)
        "alarming": alarming_output(result.nb, Path(sys.argv[1]).name, shared_cluster=True),
    }))
    """
)

# Where things ran, from Ray's state API and Ray Train's run state, asked on the head host.
WHERE = textwrap.dedent(
    """
    import json, ray
    from ray.util.state import list_actors, list_tasks
    from course_utils import runstate
    ray.init(logging_level="ERROR", log_to_driver=False)
    runs = runstate.fetch_runs("http://127.0.0.1:8265")["train_runs"]  # the head host's dashboard
    print("RESULT " + json.dumps({
        "actors": [{"job_id": a.job_id, "class": a.class_name, "node": a.node_id}
                   for a in list_actors(limit=10000, detail=True, raise_on_missing_output=False)],
        "tasks": [{"job_id": t.job_id, "name": t.name, "node": t.node_id}
                  for t in list_tasks(limit=10000, detail=True, raise_on_missing_output=False)
                  if t.type == "NORMAL_TASK"],
        "ranks": [{"run": r["name"], "job_id": r["job_id"], "rank": w["world_rank"], "ip": w["node_ip"]}
                  for r in runs for a in r.get("attempts", []) for w in a.get("workers", [])],
    }, default=str))
    """
)


@pytest.fixture(scope="module")
def hosts():
    why = unavailable()
    if why:
        pytest.skip(why)
    with Hosts() as cluster:
        yield cluster


# The driver jobs the cluster has had, and this query's own (Ray's job list gives drivers no start time, so a
# lesson's job is the one that appeared while it ran).
JOBS = textwrap.dedent(
    """
    import json, ray
    from ray.util.state import list_jobs
    ray.init(logging_level="ERROR", log_to_driver=False)
    print("RESULT " + json.dumps({"jobs": [j.job_id for j in list_jobs(raise_on_missing_output=False)],
                                  "self": ray.get_runtime_context().get_job_id()}))
    """
)


def driver_jobs(hosts: Hosts, env: dict[str, str]) -> tuple[set[str], str]:
    """The ids of every driver job so far (this query's own included), and this query's own."""
    out = hosts.python(JOBS, env, 300)
    return set(out["jobs"]), out["self"]


TEAMMATE_OBJECT = "course-teammate/lesson02-resnet18/result.json"
# "put <path>" writes a small object; "list <prefix>" prints every file under it, relative to it.
S3_FILES = textwrap.dedent(
    """
    import json, sys
    import pyarrow.fs as pafs
    from course_utils import storage
    fs, _ = storage.filesystem_and_root()
    what, path = sys.argv[1:]
    if what == "put":
        fs.create_dir(path.rsplit("/", 1)[0])
        with fs.open_output_stream(path) as f:
            f.write(b'{"teammate": "my run"}')
        print("RESULT []")
    else:
        found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
        print("RESULT " + json.dumps(sorted(f.path[len(path) + 1:] for f in found if f.type == pafs.FileType.File)))
    """
)


def left_on(host) -> list[str]:
    """Files on ``host``'s own disk: its private folders, less Ray's own session folder (``$TMPDIR/ray``)."""
    return [
        f"{folder.name}/{name}"
        for folder in host.private_folders()
        if folder.name != ".ray"
        for name in host.files(folder)
        if not (folder == host.tmp and name.split("/")[0] == "ray")
    ]


def run_on_head(hosts: Hosts, lesson: Path, env: dict[str, str]) -> tuple[dict, float, float]:
    """Run ``lesson`` on the head host; its result, and its start and end by the wall clock."""
    started = time.time()
    out = hosts.python(RUN_LESSON, env, CELL_TIMEOUT_S * 2, args=[str(lesson), str(CELL_TIMEOUT_S)])
    return out, started, time.time()


@pytest.mark.notebooks
@pytest.mark.path(CLUSTER)
@pytest.mark.path(S3)
def test_every_lesson_from_the_head_host_with_s3(hosts, summary_note):
    env = hosts.learner_env(COURSE_LEARNER="hostlearner")
    jobs, times = {}, []
    hosts.python(S3_FILES, env, 120, args=["put", f"{hosts.bucket}/course/{TEAMMATE_OBJECT}"])
    for lesson in TIER_LESSONS:
        before, _ = driver_jobs(hosts, env)
        out, started, ended = run_on_head(hosts, lesson, env)
        after, query = driver_jobs(hosts, env)
        jobs[lesson.stem[:2]] = after - before - {query}  # the lesson's kernel's job
        times.append(f"{lesson.stem[:2]} {ended - started:.0f} s")
        assert out["error"] == "", (
            f"{lesson.name} on three hosts failed in cell {out['failed_cell']} ({out['failed_first_line']!r}):\n"
            f"{out['error']}\n{hosts.logs()}"
        )
        assert not out["alarming"], f"{lesson.name} on three hosts reads as 'it broke': {out['alarming']}"
    where = hosts.python(WHERE, env, 300)
    summary_note("hosts tier, lessons on 3 hosts (S3 storage, 1+2+2 slots): " + ", ".join(times))
    # After lesson 06: what is left on each worker host's own disk, and under the shared S3 prefix.
    left = {h.name: left_on(h) for h in hosts.worker_hosts}
    in_s3 = hosts.python(S3_FILES, env, 120, args=["list", f"{hosts.bucket}/course"])
    tops = {name: sorted({"/".join(f.split("/")[:3]) for f in files}) for name, files in left.items()}
    summary_note(f"hosts tier, left after lesson 06: on the worker hosts {tops}; in S3 {in_s3}")
    assert not [f for files in left.values() for f in files if "course-ckpt-" in f], (
        f"checkpoint temp folders: {left}"
    )
    assert TEAMMATE_OBJECT in in_s3, f"lesson 06 removed a teammate's object: {in_s3}"
    mine = [f for f in in_s3 if f.startswith("course-hostlearner/")]
    assert mine == ["course-hostlearner/.course-owner.json"], (
        f"the learner's S3 folder after lesson 06: {mine}"
    )

    def job_of(lesson: str) -> set[str]:
        return jobs[lesson]

    def hosts_of(rows: list[dict], lesson: str, keep) -> list[str]:
        jobs = job_of(lesson)
        return sorted(hosts.host_of(r["node"]) for r in rows if r["job_id"] in jobs and keep(r))

    workers = {h.ip for h in hosts.worker_hosts}
    ranks_02 = {
        r["rank"]: r["ip"]
        for r in where["ranks"]
        if r["run"] == "lesson02-resnet18" and r["job_id"] in job_of("02")
    }
    train_02 = hosts_of(where["actors"], "02", lambda a: a["class"] == "RayTrainWorker")
    train_03 = hosts_of(where["actors"], "03", lambda a: a["class"] == "RayTrainWorker")
    reads_03 = hosts_of(where["tasks"], "03", lambda t: t["name"].startswith("Read"))
    pool_05 = hosts_of(where["actors"], "05", lambda a: "MapBatches(BatchPredictor)" in a["class"])
    placed = (
        f"lesson 02's ranks {ranks_02}, train workers {train_02}; lesson 03's train workers {train_03}, "
        f"read tasks {sorted(set(reads_03))} ({len(reads_03)}); lesson 05's pool actors {pool_05}"
    )
    summary_note(f"hosts tier, where things ran: {placed}")
    assert all(len(ids) == 1 for ids in jobs.values()), f"one driver job per lesson: {jobs}"
    assert any(h.startswith("worker") for h in train_02), f"lesson 02 ran no rank on a worker host: {placed}"
    assert any(h.startswith("worker") for h in train_03), f"lesson 03 ran no rank on a worker host: {placed}"
    assert any(h.startswith("worker") for h in reads_03), (
        f"lesson 03 read no Parquet on a worker host: {placed}"
    )
    assert pool_05 and all(h.startswith("worker") for h in pool_05), f"lesson 05's pool: {placed}"
    # Rank 0 writes the checkpoints; lesson 05 found lesson 02's run in S3 and served its best checkpoint.
    assert ranks_02.get(0) in workers, (
        f"lesson 02's rank 0 (the checkpoint writer) on a worker host: {placed}"
    )


def test_a_host_without_the_token_is_refused_in_words(hosts):
    """A driver on a worker host, whose home has no token, is told what to set."""
    env = {**hosts.learner_env(storage=None), "HOME": str(hosts.worker_hosts[0].home)}
    env.pop("RAY_AUTH_TOKEN")
    code = textwrap.dedent(
        """
        import json
        from course_utils import session
        try:
            session.start_ray(verbose=False)
            said = "joined"
        except ConnectionError as err:
            said = str(err)
        print("RESULT " + json.dumps(said))
        """
    )
    env["COURSE_STORAGE"] = str(hosts.worker_hosts[0].tmp / "storage")
    said = hosts.python(code, env, 300, host=hosts.worker_hosts[0])
    assert said.startswith(f"The Ray cluster at {hosts.address} uses token authentication"), said
    assert "no token" in said and "RAY_AUTH_TOKEN" in said, said


def test_local_storage_stops_lesson_02_in_one_sentence(hosts, summary_note):
    folder = hosts.head.tmp / "storage"  # a folder on the head host's disk only (TMPDIR is private elsewhere)
    learner_file = folder / "course-localstore" / "my-notes.txt"
    learner_file.parent.mkdir(parents=True, exist_ok=True)
    learner_file.write_text("a learner's own file\n")
    env = hosts.learner_env(storage=str(folder), COURSE_LEARNER="localstore")
    lesson = next(p for p in LESSONS if p.name.startswith("02_"))
    out, started, ended = run_on_head(hosts, lesson, env)
    summary_note(
        f"hosts tier, local COURSE_STORAGE: lesson 02 stopped {ended - started:.0f} s after it started"
    )
    assert out["failed_first_line"] == "# 06. RunConfig", out
    message = out["error"].splitlines()[-1]
    assert "CourseConfigError" in message and "is a folder on this machine only" in message, message
    assert all(h.ip in message for h in hosts.worker_hosts) and "s3://bucket/prefix" in message, message
    assert learner_file.read_text() == "a learner's own file\n", "the learner's file is untouched"


SHARED_FIT = textwrap.dedent(
    """
    import json, sys
    from course_utils import cluster, config, session, training
    from course_utils.history import metric_history

    session.start_ray(verbose=False)
    tiny = config.SMOKE.with_(epochs=2, train_size=512, test_size=200, batch_size=64)
    result = training.make_trainer(
        "shared-folder", tiny, num_workers=2, placement_strategy="SPREAD",
        train_loop=cluster.train_loop_recording_node, node_log_dir=sys.argv[1],
    ).fit()
    print("RESULT " + json.dumps({
        "history": metric_history(result).to_dict("list"), "checkpoint": result.checkpoint.path,
    }))
    """
)


def test_a_folder_every_host_sees_carries_a_fit(hosts):
    """A folder at the same path on every host (what an NFS mount gives) is fine as COURSE_STORAGE."""
    shared = hosts.root / "nfs"  # under the tier's folder, outside every host's private mounts
    shared.mkdir()
    env = hosts.learner_env(storage=str(shared / "storage"), COURSE_LEARNER="nfs")
    out = hosts.python(SHARED_FIT, env, 900, args=[str(shared / "nodes")])
    ranks = [json.loads(p.read_text()) for p in sorted((shared / "nodes").glob("rank*.json"))]
    assert out["history"]["epoch"] == [0, 1]
    assert out["checkpoint"].startswith(
        str(shared / "storage" / "course-nfs" / "shared-folder" / "checkpoint_")
    )
    assert {r["ip"] for r in ranks} <= {h.ip for h in hosts.hosts} and len(ranks) == 2
    assert any(r["ip"] != hosts.head.ip for r in ranks), f"a rank on a worker host: {ranks}"


READ_BACK = textwrap.dedent(
    """
    import json
    from course_utils import storage
    from course_utils.history import metric_history
    result = storage.result_from_run("lesson02-job")  # Result.from_path on the run's folder in storage
    print("RESULT " + json.dumps({
        "epochs": metric_history(result)["epoch"].tolist(), "checkpoint": result.checkpoint.path,
        "best": result.get_best_checkpoint("accuracy", "max").path,
    }))
    """
)


def test_lesson_02s_loop_submitted_as_a_job_and_read_back(hosts, summary_note):
    """docs/going-further.md's `ray job submit` of examples/lesson02_job.py, then its Result from S3."""
    env = hosts.learner_env(COURSE_LEARNER="jobber")
    job_env = {
        k: env[k] for k in ("COURSE_STORAGE", "COURSE_S3_ENDPOINT", "COURSE_PROFILE", "COURSE_LEARNER")
    }
    job_env.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
    started = time.monotonic()
    submitted = hosts.head.run(
        [
            str(VENV_BIN / "ray"),
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
        ],
        env,
        900,
    )
    took = time.monotonic() - started
    assert submitted.returncode == 0, (
        f"{submitted.stdout[-4000:]}\n{submitted.stderr[-4000:]}\n{hosts.logs()}"
    )
    assert "job done: run lesson02-job" in submitted.stdout, submitted.stdout[-3000:]
    assert "succeeded" in submitted.stdout, submitted.stdout[-2000:]
    back = hosts.python(READ_BACK, env, 300)
    summary_note(f"hosts tier, lesson 02's loop as a job: submitted, followed and finished in {took:.0f} s")
    assert back["epochs"] == [0, 1, 2]
    assert back["checkpoint"].startswith(f"{hosts.bucket}/course/course-jobber/lesson02-job/checkpoint_")
    assert back["best"].startswith(f"{hosts.bucket}/course/course-jobber/lesson02-job/checkpoint_")


# Lesson 04's mid-epoch loop on 2 workers, a checkpoint every 6 steps. A watcher thread waits for the first
# checkpoint, names the worker host a rank runs on ("LOSE <ip>": the test then takes that host away), and
# says when Ray declared its node dead ("NOTICED <wall clock>"). The fit goes on from the last checkpoint.
LOST_HOST_FIT = textwrap.dedent(
    """
    import json, sys, threading, time
    import ray
    from ray.util.state import list_actors
    from course_utils import checkpoints, config, resumable, session, storage

    name, head_ip = sys.argv[1:]
    session.start_ray(verbose=False)
    job = ray.get_runtime_context().get_job_id()
    tiny = config.SMOKE.with_(epochs=2, train_size=2048, test_size=200, batch_size=64)
    trainer = resumable.make_trainer_mid_epoch(
        name, tiny, num_workers=2, max_failures=1, checkpoint_every=6, checkpoint_uploads=["sync"]
    )
    noticed = {}

    def watch():
        while not storage.reported_checkpoints(name):
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
    state = checkpoints.load_state(result.checkpoint)
    print("RESULT " + json.dumps({
        "attempts": state["attempts"],
        "same_indices": state["seen"] == resumable.expected_indices(tiny.train_size, world=2, epochs=2),
        "noticed_at": noticed.get("at"),
    }))
    """
)


@pytest.mark.parametrize("how", ["every process killed", "link cut"])
def test_a_worker_host_lost_mid_epoch(hosts, how, summary_note):
    env = hosts.learner_env(COURSE_LEARNER="lost")
    name = "lost-host-" + how.split()[-1]
    driver = subprocess.Popen(
        hosts.head.argv([sys.executable, "-c", LOST_HOST_FIT, name, hosts.head.ip]),
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines, lost, lost_at = [], None, None
    for line in driver.stdout:
        lines.append(line)
        if line.startswith("LOSE ") and lost is None:
            lost = next(h for h in hosts.worker_hosts if h.ip == line.split()[1])
            lost_at = time.time()
            if how == "link cut":
                lost.cut_link()
            else:
                lost.kill_everything()
    driver.wait(timeout=900)
    out = "".join(lines)
    result = [line for line in lines if line.startswith("RESULT ")]
    try:
        assert driver.returncode == 0 and result, f"the fit did not survive the lost host:\n{out[-5000:]}"
        got = json.loads(result[-1][len("RESULT ") :])
    finally:
        if lost is not None:
            hosts.bring_back(lost)
    attempts = got["attempts"]
    to_notice = got["noticed_at"] - lost_at
    to_step = attempts[-1]["first_step_at"] - lost_at
    summary_note(
        f"hosts tier, a worker host lost mid-epoch ({how}): Ray declared it dead {to_notice:.1f} s later, "
        f"the first step after resuming came {to_step:.1f} s after the loss, at epoch "
        f"{attempts[-1]['start_epoch']} step {attempts[-1]['start_step']}"
    )
    assert lost is not None, f"no rank ran on a worker host:\n{out[-3000:]}"
    assert len(attempts) == 2 and (attempts[1]["start_epoch"], attempts[1]["start_step"]) > (0, 0), attempts
    assert attempts[1]["world_size"] == 2
    assert got["same_indices"], "the resumed run trained on the indices an uninterrupted run trains on"

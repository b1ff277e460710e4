"""The course on three hosts that share nothing but the network (``maintainer_tools/harness/hosts.py``).

The head host runs Ray's head with 1 CPU slot, an S3 server and the learner's driver; two worker
hosts (2 slots each, private disks) join with the token they were given. The lessons run from the
head host with ``COURSE_STORAGE`` on that S3 server (02, 05 and 06 at each push, all six with
``COURSE_HOSTS_LESSONS=all``), and Ray's state API (not printed text) says where their ranks, read
tasks, pool actors and lesson 04's killed and hung ranks ran. A local
``COURSE_STORAGE`` stops lesson 02 at its storage cell in one sentence; a folder every host sees
(standing for an NFS mount) carries a fit; lesson 02's loop runs as a job; a worker host lost
mid-fit (every process killed; its link cut too with ``COURSE_HOSTS_LOSSES=all``, as
``python -m maintainer_tools.bench hosts`` does) costs the fit one retry and no sample.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from maintainer_tools.harness.hosts import LOSSES, Hosts, lose_a_worker_host, submit_lesson02_job, unavailable
from maintainer_tools.harness.notebook_runs import CLUSTER, HOSTS, LESSONS, S3, at_each_push, tier_lessons

pytestmark = [pytest.mark.integration, pytest.mark.hosts, pytest.mark.path(HOSTS)]

CELL_TIMEOUT_S = 900
# Each push loses a worker host one way: every process killed (Ray hears it at once). A cut link costs Ray's
# health checks a minute more before it declares the host dead: COURSE_HOSTS_LOSSES=all and the hosts
# bench (whose figures lesson 04 quotes, measured both ways) lose it by a cut link too.
SELECTED_LOSSES = at_each_push("COURSE_HOSTS_LOSSES", LOSSES, lambda how: how == "every process killed")
# Each push runs the lessons whose Ray work crosses hosts through S3 and Ray's own routes: 02 (ranks on
# worker hosts, rank 0 writing to S3, every host's metrics), 05 (lesson 02's checkpoint read back from S3, a
# pool across hosts) and 06 (what is left on each host and in S3); a rank's processes killed on a worker host
# run at each push in test_a_worker_host_lost_mid_epoch. COURSE_HOSTS_LESSONS=all (the weekly job) adds 01 (a
# Ray task's files come back to the driver), 03 (Parquet read on worker hosts) and 04 (a rank killed and a
# hung rank's stack read on a worker host; its 3-4 minutes there kept CI within 50): every lesson on three hosts.
SELECTED_LESSONS = tier_lessons("COURSE_HOSTS_LESSONS", ("02", "05", "06"))

# A lesson run on the head host: the one runner every tier uses, executed copy in build/tests/hosts.
RUN_LESSON = textwrap.dedent(
    """
    import json, re, sys
    from pathlib import Path
    from maintainer_tools.harness.notebook_runs import alarming_output
    from maintainer_tools.harness.tiers import HOSTS_TIER, error_text, run_lesson
    result = run_lesson(Path(sys.argv[1]), HOSTS_TIER, timeout_s=int(sys.argv[2]))
    failed = result.error.failing_cell_index if result.error is not None else None
    print("RESULT " + json.dumps({
        "error": error_text(result)[-3000:],
        "failed_cell": failed,
        "failed_first_line": result.nb.cells[failed].source.splitlines()[0] if failed is not None else None,
        # a cluster the driver joined: the GCS's kill-race line reaches every driver (SHARED_CLUSTER_LINES)
        "alarming": alarming_output(result.nb, Path(sys.argv[1]).name, shared_cluster=True),
        # the printed lines that match the test's pattern (lesson 02's utilization, lesson 04's stacks)
        "said": [line for cell in result.nb.cells for out in cell.get("outputs", []) if out.get("name") == "stdout"
                 for line in out["text"].splitlines() if re.search(sys.argv[3], line)],
    }))
    """
)

# Where things ran, from Ray's state API and Ray Train's run state, asked on the head host.
WHERE = textwrap.dedent(
    """
    import json, ray
    from ray.util.state import list_actors, list_tasks
    from course_utils.internals import runstate
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
    from course_utils.core import storage
    fs = storage.resolve().filesystem
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


# Lesson 02's utilization summary: "<n> scrapes of <k> node(s) over <s> s: ..." (metrics.Samples.describe),
# and the first line of each rank's stack in lesson 04's hang: "rank 1 (pid 123, py-spy on its node): ..."
# (WorkerStack.describe).
SAID = r"scrapes of \d+ node\(s\)|^rank \d+ \(pid \d+, "


def run_on_head(hosts: Hosts, lesson: Path, env: dict[str, str]) -> tuple[dict, float, float]:
    """Run ``lesson`` on the head host; its result, and its start and end by the wall clock."""
    started = time.time()
    args = [str(lesson), str(CELL_TIMEOUT_S), SAID]
    out = hosts.python(RUN_LESSON, env, CELL_TIMEOUT_S * 2, args=args)
    return out, started, time.time()


@pytest.mark.notebooks
@pytest.mark.path(CLUSTER)
@pytest.mark.path(S3)
def test_the_lessons_from_the_head_host_with_s3(hosts, summary_note):
    env = hosts.learner_env(COURSE_LEARNER="hostlearner")
    jobs, times, said = {}, [], {}
    hosts.python(S3_FILES, env, 120, args=["put", f"{hosts.bucket}/course/{TEAMMATE_OBJECT}"])
    for lesson in SELECTED_LESSONS:
        before, _ = driver_jobs(hosts, env)
        out, started, ended = run_on_head(hosts, lesson, env)
        after, query = driver_jobs(hosts, env)
        jobs[lesson.stem[:2]] = after - before - {query}  # the lesson's kernel's job
        times.append(f"{lesson.stem[:2]} {ended - started:.0f} s")
        said[lesson.stem[:2]] = out["said"]
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
    # A lesson's outputs on a machine the learner never sees (lesson 01's Ray task returns its files instead).
    assert not [f for files in left.values() for f in files if f.startswith("build/")], f"outputs: {left}"
    assert TEAMMATE_OBJECT in in_s3, f"lesson 06 removed a teammate's object: {in_s3}"
    mine = [f for f in in_s3 if f.startswith("course-hostlearner/")]
    assert mine == ["course-hostlearner/.course-owner.json"], (
        f"the learner's S3 folder after lesson 06: {mine}"
    )

    def job_of(lesson: str) -> set[str]:
        return jobs.get(lesson, set())  # a lesson this run did not select ran no job

    def hosts_of(rows: list[dict], lesson: str, keep) -> list[str]:
        jobs = job_of(lesson)
        # an actor Ray Data asked for and never placed (killed while pending) has no node
        return sorted(hosts.host_of(r["node"]) for r in rows if r["job_id"] in jobs and r["node"] and keep(r))

    workers = {h.ip for h in hosts.worker_hosts}

    def ranks_of(lesson: str, run: str) -> dict[int, set[str]]:
        """{rank: the addresses it ran at, over every attempt} of ``run`` in ``lesson``'s job."""
        out: dict[int, set[str]] = {}
        for r in where["ranks"]:
            if r["run"] == run and r["job_id"] in job_of(lesson):
                out.setdefault(r["rank"], set()).add(r["ip"])
        return out

    ranks_02 = {rank: min(ips) for rank, ips in ranks_of("02", "lesson02-resnet18").items()}
    killed_04 = ranks_of("04", "lesson04-mid-epoch").get(1, set())  # the rank section 12 SIGKILLs
    hung_04 = set().union(*ranks_of("04", "lesson04-hang").values())  # section 14's stacks
    train_02 = hosts_of(where["actors"], "02", lambda a: a["class"] == "RayTrainWorker")
    train_03 = hosts_of(where["actors"], "03", lambda a: a["class"] == "RayTrainWorker")
    reads_03 = hosts_of(where["tasks"], "03", lambda t: t["name"].startswith("Read"))
    pool_05 = hosts_of(where["actors"], "05", lambda a: "MapBatches(BatchPredictor)" in a["class"])
    placed_03 = (
        f"lesson 03's train workers {train_03}, read tasks {sorted(set(reads_03))} ({len(reads_03)})"
        if "03" in jobs
        else "lesson 03 not selected"
    )
    placed_04 = (
        f"lesson 04's SIGKILLed rank at {sorted(killed_04)}, its hung ranks at {sorted(hung_04)}"
        if "04" in jobs
        else "lesson 04 not selected"
    )
    placed = (
        f"lesson 02's ranks {ranks_02}, train workers {train_02}; {placed_03}; {placed_04}; "
        f"lesson 05's pool actors {pool_05}"
    )
    summary_note(f"hosts tier, where things ran: {placed}")
    assert all(len(ids) == 1 for ids in jobs.values()), f"one driver job per lesson: {jobs}"
    assert any(h.startswith("worker") for h in train_02), f"lesson 02 ran no rank on a worker host: {placed}"
    if "03" in jobs:
        assert any(h.startswith("worker") for h in train_03), (
            f"lesson 03 ran no rank on a worker host: {placed}"
        )
        assert any(h.startswith("worker") for h in reads_03), (
            f"lesson 03 read no Parquet on a worker host: {placed}"
        )
    # (the head's one slot may hold a pool actor too, when it is free)
    assert any(h.startswith("worker") for h in pool_05), (
        f"lesson 05's pool ran nothing on a worker host: {placed}"
    )
    # Lesson 04 killed a rank on a worker host (from a task there) and read a hung rank's stack there
    # with py-spy in a task pinned to its node (the head was started without the dashboard's profiling
    # route): its self-check asserts both happened, this says where and how.
    if "04" in jobs:
        assert killed_04 & workers, f"lesson 04's SIGKILLed rank ran on no worker host: {placed}"
        assert hung_04 & workers, f"lesson 04's hung ranks ran on no worker host: {placed}"
        stacks_04 = [line for line in said["04"] if line.startswith("rank ")]
        summary_note(f"hosts tier, lesson 04's hung ranks: {stacks_04}")
        assert any("py-spy on its node)" in line for line in stacks_04), stacks_04
        assert not [line for line in stacks_04 if "could not be read" in line], stacks_04
    # Lesson 02's utilization read every host's metrics port while the fit ran.
    summary_note(f"hosts tier, lesson 02's utilization: {said['02']}")
    assert any(f"of {len(hosts.hosts)} node(s)" in line for line in said["02"]), said["02"]
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
        from course_utils.core import session
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
    from course_utils.core import config, session, storage, training
    from maintainer_tools import cluster
    from course_utils.core.history import metric_history

    session.start_ray(verbose=False)
    tiny = config.SMOKE.with_(epochs=2, train_size=512, test_size=200, batch_size=64)
    result = training.make_trainer(
        "shared-folder", tiny, num_workers=2, placement_strategy="SPREAD",
        store=storage.resolve(), train_loop=cluster.train_loop_recording_node, node_log_dir=sys.argv[1],
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
    from course_utils.core import storage
    from course_utils.core.history import metric_history
    result = storage.resolve().result("lesson02-job")  # Result.from_path on the run's folder in storage
    print("RESULT " + json.dumps({
        "epochs": metric_history(result)["epoch"].tolist(), "checkpoint": result.checkpoint.path,
        "best": result.get_best_checkpoint("accuracy", "max").path,
    }))
    """
)


def test_lesson_02s_loop_submitted_as_a_job_and_read_back(hosts, summary_note):
    """docs/going-further.md's `ray job submit` of examples/lesson02_job.py, then its Result from S3."""
    env = hosts.learner_env(COURSE_LEARNER="jobber")
    submitted, took = submit_lesson02_job(hosts, env)
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


@pytest.mark.parametrize("how", SELECTED_LOSSES)
def test_a_worker_host_lost_mid_epoch(hosts, how, summary_note):
    lost = lose_a_worker_host(hosts, how, name="lost-host-" + how.split()[-1])
    summary_note(
        f"hosts tier, a worker host lost mid-epoch ({how}): Ray declared it dead {lost.noticed_s:.1f} s later, "
        f"the first step after resuming came {lost.first_step_s:.1f} s after the loss, at epoch "
        f"{lost.attempts[-1]['start_epoch']} step {lost.attempts[-1]['start_step']}"
    )
    attempts = lost.attempts
    assert len(attempts) == 2 and (attempts[1]["start_epoch"], attempts[1]["start_step"]) > (0, 0), attempts
    assert attempts[1]["world_size"] == 2
    assert attempts[1]["start_step"] % 6 == 0, "resumed where a save (every 6 steps) said to go on"

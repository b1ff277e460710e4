"""``python -m maintainer_tools.bench hosts``: the course on three machines that share only the network (the
hosts tier's, ``maintainer_tools/harness/hosts.py``: network namespaces, so it needs root and ``ip``, as the tier does). How
long a local ``COURSE_STORAGE`` takes to be refused, lesson 02's loop as a Ray job, and a worker machine
lost in the middle of a fit like lesson 04's, once with every process of it killed and once with its
network link cut."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from maintainer_tools.bench.common import print_lines
from maintainer_tools.harness import hosts as harness_hosts

# each way of losing a host (maintainer_tools.harness.hosts.LOSSES) -> its two figures
FIGURES = {
    "every process killed": ("kill_noticed_s", "kill_to_first_step_s"),
    "link cut": ("link_cut_noticed_s", "link_cut_to_first_step_s"),
}


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Time a local storage refused, lesson 02's loop as a job, and a worker host lost both ways.

    The lost host: lesson 04's mid-epoch loop (2 workers, a checkpoint every 6 steps,
    ``max_failures=1``) runs from the head host with S3 storage, and the worker host a rank runs on
    is taken away after the first checkpoint; seconds from the loss to Ray declaring its node dead
    and to the next training step. Ends with how much longer a cut link takes to recover from than a
    machine whose processes all died.
    """
    parser = argparse.ArgumentParser(
        prog="python -m maintainer_tools.bench hosts", description=(main.__doc__ or "").split("\n")[0]
    )
    parser.parse_args(argv)
    tier = harness_hosts  # the hosts tier's own three hosts

    why = tier.unavailable()
    if why:
        print(f"hosts: not run here ({why})")
        return {}
    values: dict[str, float] = {}
    with tier.Hosts() as hosts:
        said, seconds = tier.refuse_local_storage(hosts)
        if not said:
            raise RuntimeError("a local COURSE_STORAGE on three hosts was not refused")
        values["local_storage_refused_s"] = seconds
        job, seconds = tier.submit_lesson02_job(hosts, hosts.learner_env(COURSE_LEARNER="benchjob"))
        if job.returncode != 0:
            raise RuntimeError(f"the job failed:\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}")
        values["job_submit_to_done_s"] = seconds
        for how in tier.LOSSES:
            lost = tier.lose_a_worker_host(hosts, how, name="bench-hosts-" + how.split()[-1])
            if len(lost.attempts) != 2 or not lost.same_indices:
                raise RuntimeError(f"losing {lost.host} ({how}) did not resume as it should: {lost.attempts}")
            noticed, first_step = FIGURES[how]
            values[noticed], values[first_step] = lost.noticed_s, lost.first_step_s
    values["link_cut_over_kill_to_first_step"] = (
        values["link_cut_to_first_step_s"] / values["kill_to_first_step_s"]
    )
    print_lines(values)
    return values

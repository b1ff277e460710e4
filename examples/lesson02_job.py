"""Lesson 02's training as a Ray job: submitted, left to run unattended, its Result read back from storage.

Submit it from the repository root (docs/going-further.md, "The loop as a job"):

    ray job submit --address http://<head-ip>:8265 --working-dir . \\
        --runtime-env-json '{"env_vars": {"COURSE_STORAGE": "s3://<bucket>/<prefix>", ...}}' \\
        -- python examples/lesson02_job.py

Ray copies the working directory (without what .gitignore names) to the cluster and runs this script
there as the job's driver; the training workers get the same files and variables. The Result lives in
COURSE_STORAGE under the run's name, where any later process finds it with ``Result.from_path``.
"""

from __future__ import annotations

import ray
from ray.train import CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from course_utils.core import config, storage
from course_utils.core.training import loop_config
from course_utils.lesson_code import train_loop_per_worker  # lesson 02's loop, from its #@save cell

RUN_NAME = "lesson02-job"


def main() -> None:
    ray.init()  # inside a job: the cluster that runs it
    profile = config.get_profile()
    storage_path, storage_filesystem = storage.resolve().for_ray()
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=loop_config(profile),
        scaling_config=ScalingConfig(num_workers=profile.num_workers, use_gpu=profile.use_gpu),
        run_config=RunConfig(
            name=RUN_NAME,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="accuracy", checkpoint_score_order="max"
            ),
        ),
    )
    result = trainer.fit()
    print(
        f"job done: run {RUN_NAME}, accuracy {result.metrics['accuracy']:.3f}, checkpoint {result.checkpoint.path}"
    )


if __name__ == "__main__":
    main()

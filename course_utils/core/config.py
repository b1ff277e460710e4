"""Course settings: the profile (smoke | full | auto) and where data and storage live.

Environment overrides, read when a function is called (never at import time). The getters only
compute names and paths; folders are made (and checked writable) where the course first writes:
``data.ensure_mnist`` for ``COURSE_DATA``, ``storage.Storage.prepare`` for ``COURSE_STORAGE``
(``storage.resolve`` is the one reader of ``storage_root``: everything else is handed its value).

- ``COURSE_PROFILE``: ``smoke``, ``full`` or ``auto`` (default: ``full`` when a GPU is visible).
- ``COURSE_DATA``: folder that holds MNIST (default ``<home>/data``).
- ``COURSE_STORAGE``: where Ray Train writes runs and checkpoints: a local folder, a shared
  mount, or ``s3://bucket/prefix`` (default ``<home>/storage``).
- ``COURSE_S3_ENDPOINT``: URL of an S3-compatible store (MinIO, Ceph, moto) for ``s3://`` storage;
  unset means AWS. Credentials come from the standard ``AWS_*`` variables.
- ``COURSE_LEARNER``: who is taking the course (default: the OS user name). Each learner's runs
  live in ``<COURSE_STORAGE>/course-<learner>/`` and actors in the Ray namespace
  ``course-<learner>``, so lesson 06 removes only that learner's things.

``<home>`` (``course_home``) is the repository in a checkout, else (a lesson's install cell) the
folder the notebook runs in, so that everything a lesson writes stays beside it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from course_utils.core.device import gpu_count

PROFILES = ("smoke", "full", "auto")
REPO_ROOT = Path(__file__).resolve().parents[2]


class CourseConfigError(ValueError):
    """A setting the course cannot work with; the message says what to change."""


@dataclass(frozen=True)
class Profile:
    """How big a run is. ``batch_size`` is the global batch, split across workers."""

    name: str
    num_workers: int
    use_gpu: bool
    epochs: int
    train_size: int | None  # None = every training digit available
    test_size: int | None
    batch_size: int
    lr: float = 1e-3
    seed: int = 0

    def to_dict(self) -> dict:
        """Plain dict, e.g. for ``train_loop_config``."""
        return asdict(self)

    def with_(self, **changes) -> Profile:
        """A copy with some fields changed (a lesson shrinking a demo, a test)."""
        return replace(self, **changes)


SMOKE = Profile(
    name="smoke",
    num_workers=2,
    use_gpu=False,
    epochs=3,
    train_size=2000,
    test_size=1000,
    batch_size=128,
)


def _full(gpus: int | None = None) -> Profile:
    gpus = gpu_count() if gpus is None else gpus
    return Profile(
        name="full",
        num_workers=max(1, gpus),
        use_gpu=gpus > 0,
        epochs=5,
        train_size=None,
        test_size=None,
        batch_size=256,
    )


def profile_name(name: str | None = None, gpus: int | None = None) -> str:
    """Resolve ``name`` (or ``COURSE_PROFILE``) to ``smoke`` or ``full``; ``auto`` looks at
    ``gpus`` (default: the GPUs visible here)."""
    raw = name if name is not None else os.environ.get("COURSE_PROFILE", "auto")
    value = raw.strip().lower()
    if value not in PROFILES:
        raise CourseConfigError(
            f"Unknown profile {raw!r} (from {'argument' if name is not None else 'COURSE_PROFILE'}); "
            f"allowed: {', '.join(PROFILES)}."
        )
    if value == "auto":
        value = "full" if (gpu_count() if gpus is None else gpus) > 0 else "smoke"
    return value


def get_profile(name: str | None = None, gpus: int | None = None) -> Profile:
    """The active profile: ``smoke`` on a CPU laptop and in CI, ``full`` on GPUs. ``gpus``
    overrides the GPU count seen here (``course_utils.core.plan`` passes it; tests too)."""
    return SMOKE if profile_name(name, gpus) == "smoke" else _full(gpus)


def in_checkout() -> bool:
    """True when ``course_utils`` runs from a clone of the course (``pip install -e``), False when it
    was installed on its own into site-packages (a lesson's install cell)."""
    return (REPO_ROOT / "build.sh").is_file() and (REPO_ROOT / "notebooks").is_dir()


def course_home() -> Path:
    """The folder the course's default data, storage and build folders go in: the repository in a
    checkout, else the current folder (a notebook's kernel starts in the notebook's folder)."""
    return REPO_ROOT if in_checkout() else Path.cwd()


def data_root() -> Path:
    """Folder that holds (or will hold) MNIST, from ``COURSE_DATA`` (``data.ensure_mnist`` creates it)."""
    return Path(os.environ.get("COURSE_DATA") or course_home() / "data").expanduser().resolve()


def is_remote_uri(path: str) -> bool:
    """True for ``scheme://`` storage such as ``s3://bucket/prefix``."""
    return "://" in path


def storage_root() -> str:
    """Where Ray Train writes runs (``COURSE_STORAGE``): an absolute local path or a URI."""
    raw = os.environ.get("COURSE_STORAGE") or str(course_home() / "storage")
    if is_remote_uri(raw):
        scheme, _, rest = raw.partition("://")
        return f"{scheme}://{rest.rstrip('/')}"  # "s3://" stays a URI (and fails as one: no bucket)
    return str(Path(raw).expanduser().resolve())


def s3_endpoint() -> str | None:
    """``COURSE_S3_ENDPOINT`` (e.g. ``http://127.0.0.1:9000``) for an S3-compatible store, or None (AWS)."""
    from urllib.parse import urlparse

    raw = os.environ.get("COURSE_S3_ENDPOINT", "").strip()
    if not raw:
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path.strip("/"):
        raise CourseConfigError(
            f"COURSE_S3_ENDPOINT={raw!r} is not an endpoint URL; use scheme://host[:port], "
            "e.g. COURSE_S3_ENDPOINT=http://127.0.0.1:9000 (or unset it for AWS S3)."
        )
    return f"{parsed.scheme}://{parsed.netloc}"


# What the course calls its own: the learner's storage folder and Ray namespace start with this.
COURSE_PREFIX = "course-"
LEARNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
LEARNER_CHARS = "1-32 letters, digits, '.', '_' or '-', starting with a letter or digit"


def learner() -> str:
    """Who is taking the course: ``COURSE_LEARNER``, else the OS user name; validated (it names the
    learner's storage folder and Ray namespace)."""
    raw = os.environ.get("COURSE_LEARNER", "").strip()
    source = "COURSE_LEARNER"
    if not raw:
        source = "the OS user name (COURSE_LEARNER is unset)"
        try:
            raw = getpass.getuser()
        except (KeyError, OSError, ImportError):  # a container user with no passwd entry
            raise CourseConfigError(
                "COURSE_LEARNER is unset and the OS user name cannot be read; set COURSE_LEARNER to a "
                f"short name ({LEARNER_CHARS}), e.g. COURSE_LEARNER=alice."
            ) from None
    if not LEARNER_RE.fullmatch(raw):
        raise CourseConfigError(
            f"Learner name {raw!r} (from {source}) is not usable as a folder and namespace name: "
            f"COURSE_LEARNER allows {LEARNER_CHARS}, e.g. COURSE_LEARNER=alice."
        )
    return raw


# Course actors' names start with it (lesson 05's model worker and pool), which is how lesson 06 finds them.
ACTOR_PREFIX = "course-"


def learner_namespace() -> str:
    """``course-<learner>``: the Ray namespace of this learner's course actors."""
    return f"{COURSE_PREFIX}{learner()}"


def build_root() -> Path:
    """Folder for executed notebooks, HTML (``./build.sh course``) and lesson outputs."""
    return course_home() / "build"


def ensure_writable_dir(path: Path, variable: str) -> None:
    """Create ``path`` and prove it writable (a probe file), or raise a ``CourseConfigError``
    naming the environment ``variable`` to change."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{uuid.uuid4().hex}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise CourseConfigError(
            f"{variable} points at {str(path)!r}, which is not a writable folder ({exc.strerror}). "
            f"Set {variable} to a folder you can write to, e.g. {variable}={tempfile.gettempdir()}/course."
        ) from None


@contextlib.contextmanager
def temporary_env(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a block, then restore them as they were."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

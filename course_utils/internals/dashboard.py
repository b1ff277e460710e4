"""Talk to the Ray dashboard: its address, the token it wants, its HTTP API and Ray's state API.

Since Ray 2.59 a cluster uses token authentication by default (a local ``ray.init()`` creates
``~/.ray/auth_token`` if needed and sets ``RAY_AUTH_MODE=token``; ``ray start --head`` does once a
token exists), and the dashboard's HTTP API refuses a request without ``Authorization: Bearer
<token>``: ``open_dashboard`` sends it. Ray's state API is served by the dashboard too.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class StateApiUnavailable(RuntimeError):
    """Ray's state API cannot answer because the dashboard that serves it is not running."""


class DashboardAuthError(RuntimeError):
    """The Ray dashboard refused a request: token missing (401) or not the cluster's (403)."""


class DashboardHTTPError(RuntimeError):
    """The Ray dashboard answered a request with an HTTP error other than an authentication one."""

    def __init__(self, url: str, code: int, body: str):
        super().__init__(f"{url} answered {code}: {body[:300]}")
        self.url, self.code, self.body = url, code, body


# Ray's documented token sources, in Ray's order (ray.exceptions.AuthenticationError's help text,
# `ray get-auth-token`): the variable, else the file it names, else the default file.
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
AUTH_MODE_ENV = "RAY_AUTH_MODE"


def default_token_path() -> Path:
    """``~/.ray/auth_token``: where ``ray.init()`` and ``ray get-auth-token --generate`` write the token."""
    return Path.home() / ".ray" / "auth_token"


def auth_token() -> tuple[str | None, str]:
    """The Ray auth token and where it came from, looked up as Ray does: ``RAY_AUTH_TOKEN``, else the
    file named by ``RAY_AUTH_TOKEN_PATH`` (which must then hold it), else ``~/.ray/auth_token``;
    ``(None, where)`` when there is none. Surrounding whitespace is dropped, as Ray drops it."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token, TOKEN_ENV
    named = os.environ.get(TOKEN_PATH_ENV)
    path, where = (
        (Path(named).expanduser(), f"{TOKEN_PATH_ENV}={named}") if named else (default_token_path(), "")
    )
    where = where or str(path)
    try:
        token = path.read_text().strip()
    except OSError:
        return None, where
    return (token or None), where


def _token_auth_on() -> bool:
    """True when this process uses Ray's token authentication (``RAY_AUTH_MODE=token``): a local
    ``ray.init()`` sets it for itself; a driver joining a cluster that uses tokens needs it set."""
    return os.environ.get(AUTH_MODE_ENV, "").strip().lower() == "token"


def auth_headers() -> dict[str, str]:
    """``{"Authorization": "Bearer <token>"}`` for the dashboard's HTTP API, as Ray's own clients send it:
    only when this process uses token auth, so a cluster without it never receives the token."""
    token, _ = auth_token()
    return {"Authorization": f"Bearer {token}"} if token and _token_auth_on() else {}


def _auth_refused(url: str, code: int, body: str) -> DashboardAuthError:
    """The error for a dashboard that refused our token (or its absence): where we looked, what to do."""
    token, where = auth_token()
    if not _token_auth_on():
        sent = f"sent no token ({AUTH_MODE_ENV} is not 'token' in this process)"
    elif token is None:
        sent = f"found no token ({TOKEN_ENV} unset, {where} missing or empty)"
    else:
        sent = f"sent the token from {where}, which the cluster does not accept"
    return DashboardAuthError(
        f"{url} answered {code} ({body or 'unauthorized'}): the Ray cluster uses token authentication and the "
        f"course {sent}. The course looks in {TOKEN_ENV}, then the file named by {TOKEN_PATH_ENV}, then "
        f"{default_token_path()}. Get the cluster's token on its head node with `ray get-auth-token`, then "
        f"`export {AUTH_MODE_ENV}=token {TOKEN_ENV}=<token>` (or put it in {default_token_path()}) before "
        "starting the notebook."
    )


def open_dashboard(url: str, timeout_s: float = 20.0) -> bytes:
    """GET ``url`` on a Ray dashboard, authenticated (``auth_headers``); the response body.
    ``DashboardAuthError`` when it refuses the token (401, or 403 about the token),
    ``DashboardHTTPError`` for any other HTTP error, ``URLError`` when it cannot be reached."""
    request = urllib.request.Request(url, headers=auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace").strip()
        if err.code == 401 or (err.code == 403 and "authentication token" in body.lower()):
            raise _auth_refused(url, err.code, body[:200]) from None
        raise DashboardHTTPError(url, err.code, body or str(err.reason)) from None


# What ray.init() returned in start_ray, with the cluster it belongs to (gcs address): its public
# ``dashboard_url`` is the only public place Ray gives the dashboard's address. A later
# ray.shutdown() and start_ray() replace it.
_ray_context: tuple[str, Any] | None = None


def remember_ray_context(context: Any) -> None:
    """Keep what ``ray.init`` returned (``session.start_ray`` calls this), for ``dashboard_url``."""
    global _ray_context
    import ray

    _ray_context = (ray.get_runtime_context().gcs_address, context)


def dashboard_url() -> str | None:
    """This process's Ray dashboard as an ``http://`` URL, from what ``ray.init`` returned in
    ``start_ray``; None when it is not running (no ray[default]) or Ray was not started there."""
    import ray

    if _ray_context is None or not ray.is_initialized():
        return None
    gcs_address, context = _ray_context
    if gcs_address != ray.get_runtime_context().gcs_address:
        return None  # a context of an earlier Ray in this process
    address = getattr(context, "dashboard_url", None)
    return None if not address else address if address.startswith("http") else f"http://{address}"


def state_address() -> str:
    """This driver's cluster, for the state API: without an address it auto-detects Ray on the machine
    and fails with "Found multiple active Ray instances" when two notebooks each started one."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError(
            "Ray is not running in this process: call course_utils.core.session.start_ray() first."
        )
    if not dashboard_url():
        raise StateApiUnavailable(
            "The Ray dashboard is not running, and the state API is served by it. It needs the `default` extra "
            "(ray[default], in requirements.txt) and can fail to start on an overloaded machine: see "
            "dashboard.log in the session's logs folder, then restart the kernel."
        )
    return ray.get_runtime_context().gcs_address


def alive_actors(class_substring: str = "") -> list[dict[str, Any]]:
    """Alive actors from Ray's state API (needs the dashboard), optionally filtered by class: each
    row has the actor's class, id, pid, node, name, Ray namespace and job id."""
    from ray.util.state import list_actors

    actors = list_actors(address=state_address(), filters=[("state", "=", "ALIVE")], limit=1000, detail=True)
    rows = [
        {
            "class_name": a.class_name,
            "actor_id": a.actor_id,
            "pid": a.pid,
            "node_id": a.node_id,
            "name": a.name,
            "namespace": a.ray_namespace,
            "job_id": a.job_id,
        }
        for a in actors
    ]
    return [r for r in rows if class_substring in (r["class_name"] or "")]


TRAIN_ACTOR_CLASSES = ("TrainController", "RayTrainWorker")


def train_actors() -> list[dict[str, Any]]:
    """Ray Train's controller and worker actors in any state (alive during a fit, dead after)."""
    from ray.util.state import list_actors

    rows = []
    for cls in TRAIN_ACTOR_CLASSES:
        for a in list_actors(
            address=state_address(), filters=[("class_name", "=", cls)], limit=1000, detail=True
        ):
            rows.append(
                {"class_name": a.class_name, "state": a.state, "pid": a.pid, "actor_id": a.actor_id[:12]}
            )
    return rows

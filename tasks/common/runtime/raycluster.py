"""The one place that starts or joins Ray, for the stages with ``engine: ray`` (dedup, leakage).

Ray is the optional dependency group ``.[ray]``; it is imported only when a stage's ``engine`` is ``ray`` (a
``ray_engine`` module's remote functions are made when first called), so ``make run`` on the default params never
imports Ray.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from tasks.config.cluster import RayParams


def connect(cfg: RayParams) -> Any:
    """Start a local Ray instance (``cfg.address`` null) or join the cluster at ``cfg.address``; returns ``ray``.

    A local instance gets ``cfg.num_cpus`` CPUs and its dashboard (when enabled) binds to
    ``cfg.dashboard_host`` (127.0.0.1 by default). Usage statistics are off (this pipeline runs offline).
    An instance this process already started is reused; the SIGTERM handler in place before is kept. Raises
    ``ImportError`` with the install command when Ray is missing.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data needs its own import; fail here, not mid-stage)
    except ImportError as err:
        raise ImportError(f"engine: ray needs Ray Data: pip install -e '.[ray]' ({err})") from None
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"address": cfg.address, "log_to_driver": False, "configure_logging": False}
    if cfg.address is None:
        options.update(
            num_cpus=cfg.num_cpus,
            include_dashboard=cfg.include_dashboard,
            dashboard_host=cfg.dashboard_host,
            dashboard_port=cfg.dashboard_port,
            object_store_memory=None if cfg.object_store_mib is None else cfg.object_store_mib << 20,
        )
    handler = signal.getsignal(signal.SIGTERM)
    ray.init(**options)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)  # ray.init replaces it; the runner's marks the MLflow run KILLED
    return ray


def remote(func: Any) -> LazyRemote:
    """``ray.remote(func)``, made when first called: importing a ``ray_engine`` module does not import Ray."""
    return LazyRemote(func)


class LazyRemote:
    """A Ray remote function made on first use (``remote`` and ``options`` as ``ray.remote(func)``'s)."""

    def __init__(self, func: Any) -> None:
        self._func, self._made = func, None

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """``ray.remote(func).remote(*args, **kwargs)``: submit one task; returns its object ref(s)."""
        return self._remote_function().remote(*args, **kwargs)

    def options(self, **kwargs: Any) -> Any:
        """``ray.remote(func).options(**kwargs)``."""
        return self._remote_function().options(**kwargs)

    def _remote_function(self) -> Any:
        if self._made is None:
            import ray

            self._made = ray.remote(self._func)
        return self._made


def gather(refs: list, desc: str) -> list:
    """``ray.get`` of ``refs`` with a progress bar that advances as each task finishes; results in ``refs`` order."""
    import ray

    results, pending = {}, list(refs)
    with tqdm(total=len(refs), desc=desc, unit="task") as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            results[done[0]] = ray.get(done[0])
            bar.update(1)
    return [results[ref] for ref in refs]


def in_turn(ray: Any, submit: Callable[[int], Any], n: int, at_once: int, desc: str) -> list:
    """The results of ``submit(k)`` (a Ray task's ref) for ``k`` in ``0 .. n - 1``, in that order, with at most
    ``at_once`` tasks submitted and unfinished: a task's arguments (put in the object store by this process,
    whose memory they then count in) wait in the store only while it is near its turn."""
    results: dict[int, object] = {}
    pending: dict = {}
    with tqdm(total=n, desc=desc, unit="task") as bar:
        for k in range(n):
            pending[submit(k)] = k
            while len(pending) >= at_once or (k == n - 1 and pending):
                done, _ = ray.wait(list(pending), num_returns=1)
                results[pending.pop(done[0])] = ray.get(done[0])
                bar.update(1)
    return [results[k] for k in range(n)]


def cpus(ray: Any) -> int:
    """CPUs of the cluster ``ray`` is connected to (at least 1)."""
    return max(int(ray.cluster_resources().get("CPU", 1)), 1)

"""Run one benchmark part in a fresh process and measure it the same way for every tool.

``run_measured`` starts a command, samples the resident set size of its whole process tree every
``SAMPLE_S`` seconds from ``/proc`` (Linux), and returns:
- ``seconds``: wall time from spawn to exit, so the interpreter start, imports, input reading and output
  writing count for every tool alike;
- ``peak_rss_mib``: the largest single process of the tree: the largest ``VmHWM`` (each process's own peak,
  exact however late it is read) seen in ``/proc``. Not ``wait4``'s ``ru_maxrss``: that misses processes
  their parent never reaped (a ``forkserver`` pool's workers) and, as the kernel keeps the forked copy's
  high-water mark across ``exec``, reports at least the benchmark parent's own size;
- ``peak_tree_rss_mib``: the largest sampled sum over the tree (what a multi-process tool holds at once; a
  peak shorter than ``SAMPLE_S`` can be missed);
- ``driver_peak_rss_mib``: the ``VmHWM`` of the spawned process itself, last read ``SAMPLE_S`` or less before
  it exits. With Ray the largest process is often a worker (its RSS counts the object store's shared pages it
  touched), so the driver's own peak, what issue 63's goals bound, is read apart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path

SAMPLE_S = 0.05


class TimedOut(RuntimeError):
    """The command ran past its time limit and was killed (with its process group)."""


def run_measured(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, log: Path | None = None, timeout_s: float = 1e9
) -> dict:
    """Run ``command`` to completion; raises ``TimedOut`` after ``timeout_s`` seconds (the whole process group
    killed) and ``RuntimeError`` with the tail of its output when it fails."""
    sink = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child writes it; closed at its end
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    peak = {"tree": 0.0, "process": 0.0, "driver": 0.0}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(process.pid, peak, stop), daemon=True)
    sampler.start()
    killer = threading.Timer(timeout_s, os.killpg, args=(process.pid, signal.SIGKILL))
    killer.start()
    _, status = os.waitpid(process.pid, 0)
    timed_out = not killer.is_alive() and time.perf_counter() - start >= timeout_s
    killer.cancel()
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if log:
        sink.close()
    if timed_out:
        raise TimedOut(f"{' '.join(command[:3])} ... killed after its {timeout_s:.0f} s limit")
    if process.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log else ""
        raise RuntimeError(f"{' '.join(command[:3])} ... exited {process.returncode}:\n{tail}")
    return {
        "seconds": seconds,
        "peak_rss_mib": peak["process"],
        "peak_tree_rss_mib": peak["tree"],
        "driver_peak_rss_mib": peak["driver"],
    }


def rates(docs: int, seconds: float) -> dict:
    """A measured run's throughput fields: ``cores`` (this machine's), ``docs_per_s`` and ``docs_per_s_per_core``."""
    cores = os.cpu_count() or 1
    return {"cores": cores, "docs_per_s": docs / seconds, "docs_per_s_per_core": docs / seconds / cores}


def _sample(root: int, peak: dict, stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        memory = [memory_mib(pid) for pid in _tree(root)]
        peak["tree"] = max(peak["tree"], sum(rss for rss, _ in memory))
        peak["process"] = max([peak["process"]] + [high for _, high in memory])
        peak["driver"] = max(peak["driver"], memory[0][1])  # _tree lists the root first


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])  # the name field may hold spaces and ")"
            children.setdefault(parent, []).append(int(entry))
    tree, frontier = [root], [root]
    while frontier:
        frontier = [child for pid in frontier for child in children.get(pid, [])]
        tree += frontier
    return tree


def memory_mib(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of ``pid`` in MiB; zeros for a process that has gone."""
    fields = status_mib(pid, ("VmRSS", "VmHWM"))
    return (fields["VmRSS"], fields["VmHWM"]) if len(fields) == 2 else (0.0, 0.0)


def status_mib(pid: int, keys: Iterable[str]) -> dict[str, float]:
    """The kB counters ``keys`` of ``/proc/<pid>/status`` (``VmRSS``, ``RssAnon``, ...) in MiB, read at once;
    those it lacks left out (all of them for a process that has gone, or off Linux)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    out = {}
    for key in keys:
        try:
            out[key] = int(fields[key].split()[0]) / 1024
        except (KeyError, ValueError, IndexError):
            continue
    return out

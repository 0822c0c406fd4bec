"""Stdlib-only helpers shared by the peer runners (they run in the peers' own environments, not the pipeline's).

Peak memory: ``resource.getrusage`` (RUSAGE_SELF, RUSAGE_CHILDREN) only sees children that were reaped, and a
pool started with ``forkserver`` (datatrove's default) has its workers reaped by the fork server, which itself is
never reaped before the runner ends. So a background thread also polls ``/proc`` for every descendant of the
runner and records its ``VmHWM`` (the kernel's own per-process peak RSS, monotonic, so a late sample is exact)
and the sum of ``VmRSS`` over the whole process tree at each sample.
"""

from __future__ import annotations

import json
import os
import resource
import threading
from pathlib import Path


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _status_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB; zeros if it is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


class TreeMemory:
    """Polls the runner's process tree every ``interval`` seconds until ``stop()``."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.max_descendant_hwm_kib = 0
        self.max_tree_rss_kib = 0
        self.max_processes = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> TreeMemory:
        self._thread.start()
        return self

    def _sample(self) -> None:
        me = os.getpid()
        kids = _children_map()
        todo, tree = [me], []
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(kids.get(pid, []))
        total = 0
        for pid in tree:
            rss, hwm = _status_kib(pid)
            total += rss
            if pid != me:
                self.max_descendant_hwm_kib = max(self.max_descendant_hwm_kib, hwm)
        self.max_tree_rss_kib = max(self.max_tree_rss_kib, total)
        self.max_processes = max(self.max_processes, len(tree))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._sample()
        self._stop.set()
        self._thread.join()
        self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        children_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        return {
            # the largest single process of the run: max of getrusage(SELF), getrusage(CHILDREN) and the polled VmHWM
            "peak_rss_mib": round(max(self_kib, children_kib, self.max_descendant_hwm_kib) / 1024, 1),
            "peak_rss_detail_mib": {
                "rusage_self": round(self_kib / 1024, 1),
                "rusage_children": round(children_kib / 1024, 1),
                "polled_descendant_vmhwm": round(self.max_descendant_hwm_kib / 1024, 1),
                # sum of VmRSS over the runner and all its live descendants, max over samples (shared pages
                # counted once per process, so this over-states a forked tree somewhat)
                "polled_tree_sum_vmrss": round(self.max_tree_rss_kib / 1024, 1),
                "max_processes_seen": self.max_processes,
            },
        }


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_result(path: str | Path, result: dict) -> None:
    result["removed_ids"] = sorted(result["removed_ids"])
    result["clusters"] = sorted(sorted(c) for c in result["clusters"])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

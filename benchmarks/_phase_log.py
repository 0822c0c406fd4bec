"""The log ``scaling.py``'s stage child passes to the stage's ``run``: the driver's memory at each progress line.

A stage writes a progress line (``log.info``) as each of its steps ends, e.g. leakage's "leakage semantic: ...
windows from the store, ... embedded" once the semantic pass's corpus windows are embedded and searched. The
driver's peak RSS of a whole run (``_measure.run_measured``) cannot say which step set it; a line through two
small sizes then mixes one step's growth with another's fixed costs. ``PhaseLog`` samples this process's
resident set every ``SAMPLE_S`` seconds (``/proc/self/status``, Linux) and, at each line, records a *phase*: the
step that the line ends, from the line before it (the first from the log's creation):

- ``message``: the line;
- ``seconds``: since the log was created;
- ``rss_mib``: ``VmRSS`` as the line is written;
- ``peak_rss_mib``: the largest ``VmRSS`` sampled during the phase, the two ends included, or ``VmHWM`` where
  the high-water mark rose during the phase (a peak shorter than ``SAMPLE_S``, which the sampler can miss, then
  still counts; a new high-water mark can only have been reached since the previous line);
- ``hwm_mib``: ``VmHWM``, the process's own high-water mark so far;
- ``anon_mib``, ``file_mib``, ``shmem_mib``: ``VmRSS``'s parts as the line is written (``RssAnon``: the heap and
  anonymous maps; ``RssFile``: mapped files' pages, e.g. Arrow files read by memory map; ``RssShmem``: shared
  memory, e.g. the pages of Ray's object store this process wrote or read), so a growth is told by its kind.

``finish()`` closes the last phase (``message`` ``"(end)"``) and stops the sampler. The numbers the stage sends
to MLflow only (``metrics``) are kept in ``tracked``, e.g. the semantic pass's seconds, which the stage's
metrics file leaves out so that it repeats byte for byte.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from benchmarks._measure import SAMPLE_S, memory_mib, status_mib
from tasks.tracking import NullLog

END = "(end)"
#: ``/proc/<pid>/status``'s fields of ``VmRSS``'s parts, by the name a phase records them under
RSS_PARTS = {"RssAnon": "anon_mib", "RssFile": "file_mib", "RssShmem": "shmem_mib"}


class PhaseLog(NullLog):
    """A ``NullLog`` that records ``phases`` (the module's docstring) and the stage's MLflow-only numbers."""

    def __init__(self) -> None:
        self.tracked: dict[str, float] = {}
        self.phases: list[dict] = []
        self._start = time.perf_counter()
        status = status_mib(os.getpid(), ("VmRSS", "VmHWM"))  # one read for both
        self._peak = status.get("VmRSS", 0.0)  # the first phase starts at the log's creation
        self._hwm = status.get("VmHWM", 0.0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def info(self, message: str) -> None:
        super().info(message)
        self._close_phase(message)

    def metrics(self, values: Mapping[str, Any], step: int | None = None) -> None:
        self.tracked.update({k: v for k, v in values.items() if isinstance(v, int | float)})

    def finish(self) -> list[dict]:
        """Close the last phase, stop sampling; returns ``phases``."""
        self._close_phase(END)
        self._stop.set()
        self._sampler.join()
        return self.phases

    def _close_phase(self, message: str) -> None:
        status = status_mib(os.getpid(), ("VmRSS", "VmHWM", *RSS_PARTS))  # one read: the parts sum to this VmRSS
        rss, hwm = status.get("VmRSS", 0.0), status.get("VmHWM", 0.0)
        with self._lock:
            peak, self._peak = max(self._peak, rss), rss  # the next phase starts at this line's RSS
        if hwm > self._hwm:  # a new high-water mark: reached in this phase, maybe between two samples
            peak = max(peak, hwm)
        self._hwm = max(self._hwm, hwm)
        self.phases.append(
            {
                "message": message,
                "seconds": round(time.perf_counter() - self._start, 3),
                "rss_mib": round(rss, 1),
                "peak_rss_mib": round(peak, 1),
                "hwm_mib": round(hwm, 1),
                **{name: round(status[key], 1) for key, name in RSS_PARTS.items() if key in status},
            }
        )

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with self._lock:  # read under the lock: a sample taken before a line belongs to the phase it ends
                self._peak = max(self._peak, memory_mib(os.getpid())[0])

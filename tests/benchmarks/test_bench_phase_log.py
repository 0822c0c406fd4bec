"""benchmarks/_phase_log.PhaseLog: a phase's peak is the largest RSS between two progress lines, not the run's."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from benchmarks import _phase_log
from benchmarks._phase_log import END, PhaseLog

MIB = 2**20
HELD_MIB = 256


def _hold(mib: int) -> np.ndarray:
    block = np.ones(mib * MIB // 8)  # np.ones writes every page: resident, not only reserved
    time.sleep(0.5)  # ten samples at SAMPLE_S 0.05
    return block


def test_a_transient_allocation_is_the_peak_of_its_own_phase_only():
    log = PhaseLog()
    log.info("before")
    block = _hold(HELD_MIB)
    del block  # freed before the line: only the sampler can have seen it
    log.info("allocated and freed")
    log.info("idle")
    phases = log.finish()
    before, held, idle, end = phases
    assert [p["message"] for p in phases] == ["before", "allocated and freed", "idle", END]
    # the 256 MiB array was resident during the second phase only; numpy's free returns it to the system
    assert held["peak_rss_mib"] >= before["rss_mib"] + 0.9 * HELD_MIB
    assert held["rss_mib"] < before["rss_mib"] + 0.1 * HELD_MIB
    assert idle["peak_rss_mib"] < before["rss_mib"] + 0.1 * HELD_MIB
    # the high-water mark keeps the peak; the times increase
    assert end["hwm_mib"] >= held["peak_rss_mib"] - 1
    assert before["seconds"] < held["seconds"] - 0.4 < end["seconds"]
    # VmRSS is the sum of its parts (the kernel's counters, read apart a moment later: within 2 MiB)
    assert abs(idle["anon_mib"] + idle["file_mib"] + idle["shmem_mib"] - idle["rss_mib"]) < 2


def test_a_peak_between_two_samples_is_caught_by_the_high_water_mark(monkeypatch):
    # no sample during the test: only VmHWM can see the array; "5" resets this process's VmHWM to its VmRSS
    # (Documentation/filesystems/proc.rst, clear_refs), so the array raises the mark whatever ran before
    monkeypatch.setattr(_phase_log, "SAMPLE_S", 3600.0)
    Path("/proc/self/clear_refs").write_text("5")
    log = PhaseLog()
    log.info("before")
    block = np.ones(HELD_MIB * MIB // 8)
    del block
    log.info("allocated and freed")
    log.info("idle")
    before, held, idle, _ = log.finish()
    assert held["peak_rss_mib"] >= before["rss_mib"] + 0.9 * HELD_MIB
    assert held["rss_mib"] < before["rss_mib"] + 0.1 * HELD_MIB
    # the mark stays up, but did not rise in the next phase: that phase's peak is its own
    assert idle["hwm_mib"] >= before["rss_mib"] + 0.9 * HELD_MIB > idle["peak_rss_mib"]


def test_the_mlflow_only_numbers_are_kept_and_the_rest_dropped():
    log = PhaseLog()
    log.metrics({"semantic_seconds_total": 1.5, "nested": {"a": 1}, "windows": 3})
    assert log.tracked == {"semantic_seconds_total": 1.5, "windows": 3}
    assert [p["message"] for p in log.finish()] == [END]

"""``tasks.common.runtime.gcpause.paused_gc``: the collector is off inside, back to its state after, even on errors."""

from __future__ import annotations

import gc

import pytest

from tasks.common.runtime.gcpause import freeze, frozen_survivors, paused_gc


def test_the_collector_is_paused_inside_and_restored_after_even_when_the_block_raises():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: still off after the inner block
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled():
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_objects_alive_at_freeze_are_out_of_the_collector_until_the_block_ends():
    with frozen_survivors():
        before = gc.get_freeze_count()
        kept = [[k] for k in range(1000)]  # tracked containers alive at the freeze
        freeze()
        assert gc.get_freeze_count() >= before + 1000
    assert gc.get_freeze_count() == 0 and len(kept) == 1000

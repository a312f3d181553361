"""A Dagster instance one test forgot to leave cannot break a later test's Definitions load
(support/dagster_state.py: the CI failure "Attempted to resolve undefined DagsterInstance weakref")."""

from __future__ import annotations

import gc

import dagster as dg


@dg.asset
def one() -> int:
    return 1


def test_a_forgotten_instance_collected_during_a_later_one_leaves_its_storage_current() -> None:
    with dg.instance_for_test() as first:
        # entered while `first`'s storage is current, never left: what a context built without
        # `with` leaves behind for the garbage collector
        forgotten = dg.DagsterInstance.from_ref(first.get_ref()).__enter__()
    del first
    gc.collect()  # `first` is gone
    with dg.instance_for_test() as second:
        del forgotten
        gc.collect()  # the forgotten instance's context closes now, in the middle of this one
        # Dagster's reset would bring back `first`'s storage here, and this load would raise
        assert dg.materialize([one], instance=second).success
        assert dg.materialize([one], instance=second).success


def test_instances_left_normally_restore_the_storage_before_them() -> None:
    from dagster._core.storage.defs_state.base import DefsStateStorage

    before = DefsStateStorage.get()
    with dg.instance_for_test() as outer:
        assert DefsStateStorage.get() is outer.defs_state_storage
        with dg.instance_for_test() as inner:
            assert DefsStateStorage.get() is inner.defs_state_storage
        assert DefsStateStorage.get() is outer.defs_state_storage
    assert DefsStateStorage.get() is before

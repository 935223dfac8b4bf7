"""Process-wide tuning of the long-running processes."""

from __future__ import annotations

import gc
import weakref

from factloom.runtime import YOUNG_GC_THRESHOLD, settle_heap


class _Node:
    other: _Node | None = None


def test_settle_heap_freezes_what_is_held_and_still_collects_what_comes_after() -> None:
    threshold = gc.get_threshold()
    kept = _Node()
    try:
        frozen = settle_heap()
        assert frozen > 1000  # the imported modules, at least
        # another thread of the test process may free a frozen object meanwhile; nothing else freezes
        assert gc.get_freeze_count() <= frozen
        assert not any(o is kept for o in gc.get_objects())  # frozen: no collection walks it
        assert gc.get_threshold()[0] == max(threshold[0], YOUNG_GC_THRESHOLD)
        # a cycle made afterwards is still found and freed
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)

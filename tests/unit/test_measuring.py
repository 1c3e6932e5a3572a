"""The measured phase's frame (``point/performance.measuring``): what it
sets up around the load and undoes after it."""

from __future__ import annotations

import asyncio
import gc

import pytest

from mlpe_fast.point.measured import Measured
from mlpe_fast.point.performance import measuring


class _Phase:
    def stop(self) -> None:
        raise AssertionError("no duration cap was asked for")


async def _inside(fail: bool) -> int:
    measured = Measured()
    with measuring(measured, None, None, _Phase(), None):
        frozen = gc.get_freeze_count()
        if fail:
            raise RuntimeError("the load failed")
    return frozen


@pytest.mark.parametrize("fail", [False, True])
def test_the_objects_made_before_the_load_are_set_aside_from_the_collector_while_it_runs(
    fail: bool,
) -> None:
    # The load's collections walk only what the load made (issue 23); after
    # it, failed or not, everything is collected as before.
    assert gc.get_freeze_count() == 0
    held = [[i] for i in range(1_000)]  # made before the load: frozen with the rest
    if fail:
        with pytest.raises(RuntimeError, match="the load failed"):
            asyncio.run(_inside(fail))
    else:
        assert asyncio.run(_inside(fail)) >= len(held)
    assert gc.get_freeze_count() == 0

"""In a fused pipeline each configuration's wall time is its own share, not the group's."""

from __future__ import annotations

import pytest

from df_ray.pipeline.runner import own_wall_times


def test_alone_a_configuration_gets_the_whole_wall_time():
    assert own_wall_times(12.0, [3.0]) == [12.0]
    assert own_wall_times(12.0, [0.0]) == [12.0]


def test_the_group_wall_time_is_split_by_stage_time():
    walls = own_wall_times(10.0, [6.0, 3.0, 1.0])
    assert walls == pytest.approx([6.0, 3.0, 1.0])
    assert sum(walls) == pytest.approx(10.0)
    # A configuration whose calls were all paid by another costs only its CPU work.
    cheap = own_wall_times(10.0, [9.9, 0.1])
    assert cheap[1] < 0.2 < cheap[0]


def test_no_recorded_work_splits_evenly():
    assert own_wall_times(9.0, [0.0, 0.0, 0.0]) == [3.0, 3.0, 3.0]

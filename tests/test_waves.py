"""mlsys.waves against counts worked out by hand."""

from __future__ import annotations

import pytest

from mlsys import waves


def test_one_tile_over_a_full_wave_costs_a_second_wave():
    w = waves.waves(133, 132)
    assert (w.waves, w.slots) == (2, 132)
    assert w.efficiency == pytest.approx(133 / 264)


def test_full_waves_are_fully_efficient():
    assert waves.waves(264, 132) == waves.Waves(264, 132, 2, 1.0)
    assert waves.waves(264, 66, 2).efficiency == 1.0


def test_matmul_tiles_on_an_h100():
    # 1408 / 128 = 11 -> 121 tiles (one wave); 1472 / 128 -> 12 -> 144 tiles (two waves)
    assert waves.matmul_waves(1408, 1408, 128, 128, 132).waves == 1
    w = waves.matmul_waves(1472, 1472, 128, 128, 132)
    assert (w.tiles, w.waves) == (144, 2)
    assert w.efficiency == pytest.approx(144 / 264)
    # 4096 with 128 x 256 tiles: 32 * 16 = 512 tiles, ceil(512 / 132) = 4 waves, 512 / 528 busy
    w = waves.matmul_waves(4096, 4096, 128, 256, 132)
    assert (w.tiles, w.waves, w.efficiency) == (512, 4, pytest.approx(512 / 528))


@pytest.mark.parametrize("args", [(0, 132), (10, 0), (10, 132, -1), (1.5, 132)])
def test_bad_counts_raise(args):
    with pytest.raises((ValueError, TypeError)):
        waves.waves(*args)

"""The scale benchmark's shape classifier (tests/bench/scale_shape.py) on curves of known form."""

from __future__ import annotations

import math

import pytest

from tests.bench.scale_shape import classify, classify_increment, log_log_slope

SIZES = [8, 64, 512, 2000, 10_000]


def test_slope_of_a_power_law_is_its_exponent() -> None:
    assert log_log_slope(SIZES, [3 * x ** 0.75 for x in SIZES]) == pytest.approx(0.75)


@pytest.mark.parametrize(("curve", "name"), [
    (lambda x: 5.0, "constant"),
    (lambda x: 5.0 + 0.00001 * x, "constant"),  # +2 % at 10,000: noise
    (lambda x: 2.0 * math.log(x), "log"),
    (lambda x: 40e6 + 20_000 * x, "log"),  # a big fixed base hides a linear part at these x
    (lambda x: 20_000 * x, "linear"),
    (lambda x: x * math.log(x), "worse"),  # slope 1.21 over these sizes
    (lambda x: 0.01 * x * x, "worse"),
])
def test_known_curves(curve, name) -> None:  # type: ignore[no-untyped-def]
    assert classify(SIZES, [curve(x) for x in SIZES]).name == name


def test_flat_within_noise_is_constant_even_with_a_steep_slope() -> None:
    shape = classify([1, 2], [1.0, 1.2])  # slope 0.26, growth 20 %
    assert shape.name == "constant" and shape.growth_ratio == pytest.approx(1.2)


def test_zero_cost_points_and_unsorted_sizes() -> None:
    assert classify([100, 1, 10], [0.0, 0.0, 0.0]).name == "constant"
    assert classify([100, 1, 10], [100.0, 1.0, 10.0]).name == "linear"
    # no snapshot yet at the smallest size: fitted over the sizes that have one
    shape = classify([1, 5, 20], [0.0, 1815.0, 7354.0])
    assert shape.name == "linear" and shape.growth_ratio == pytest.approx(7354 / 1815)
    assert classify([1, 5], [0.0, 3.0]).name == "unknown"


def test_one_size_is_unknown() -> None:
    assert classify([8, 8], [1.0, 2.0]).name == "unknown"


def test_increment_over_a_fixed_base() -> None:
    producers = [1, 8, 64]  # the default run's sizes
    threads = [20 + 1.76 * (x - 1) for x in producers]
    assert classify(producers, threads).name == "log"  # the base hides it in the total
    assert classify_increment(producers, threads).name == "linear"
    flat = [120e6, 121e6, 120.5e6]  # within noise of the base: nothing added
    assert classify_increment(producers, flat).name == "constant"

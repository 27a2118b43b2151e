"""The split rule: sums, minimum part, nearness to quota, ties, bad input."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshpar.core.splits import even_sizes, offsets, split_sizes


def test_design_example_64_filters_over_four_speeds():
    assert split_sizes(64, [0.8, 0.5, 0.3, 0.2]) == [28, 18, 11, 7]


def test_thirteen_filters_split_over_three_devices():
    assert split_sizes(13, [1, 1, 1]) == [5, 4, 4]
    assert sum(split_sizes(13, [3, 2, 1])) == 13


def test_ties_go_to_the_lower_index():
    assert split_sizes(5, [1, 1]) == [3, 2]
    assert split_sizes(7, [1, 1, 1, 1]) == [2, 2, 2, 1]


def test_every_part_gets_at_least_one_even_with_tiny_weights():
    assert split_sizes(3, [100, 1, 1]) == [1, 1, 1]
    assert split_sizes(10, [1e9, 1, 1, 1]) == [7, 1, 1, 1]


def test_exact_quotas_are_kept():
    assert split_sizes(12, [3, 2, 1]) == [6, 4, 2]
    assert even_sizes(12, 4) == [3, 3, 3, 3]


@pytest.mark.parametrize("weights, message", [
    ([], "empty"),
    ([1, -1], "positive"),
    ([0, 0], "positive"),
    ([1, float("nan")], "finite"),
    ([1, float("inf")], "finite"),
    (["a", 1], "numbers"),
])
def test_bad_weights_raise_value_error_naming_the_dimension(weights, message):
    with pytest.raises(ValueError, match=message) as info:
        split_sizes(10, weights, what="conv1_filters")
    assert "conv1_filters" in str(info.value)


def test_dimension_smaller_than_number_of_parts_is_rejected():
    with pytest.raises(ValueError, match="cannot be split into 4 parts"):
        split_sizes(3, [1, 1, 1, 1], what="model axis")


def test_non_integer_size_is_rejected():
    with pytest.raises(ValueError, match="integer"):
        split_sizes(10.5, [1, 1])


@pytest.mark.parametrize("parts", [0, -1, 2.5, np.float64(2), "2", None, True])
def test_even_sizes_refuses_a_bad_number_of_parts_naming_the_dimension(parts):
    """A float, string, None or bool count of parts was a TypeError from inside the
    split ("can't multiply sequence by non-int of type 'float'")."""
    with pytest.raises(ValueError, match="conv1_filters: number of parts must be an "
                                         "integer >= 1, got "):
        even_sizes(10, parts, what="conv1_filters")
    assert even_sizes(10, np.int64(3)) == [4, 3, 3]


def test_a_size_too_large_for_float_quotas_is_refused_not_split_forever():
    """10**30 units: float quotas miss the total by ~10**14 units, which the old loops
    added back one at a time (`meshpar plan --batch 10**30` hung)."""
    assert sum(split_sizes(2 ** 53, [0.8, 0.5, 0.3])) == 2 ** 53
    for total in (2 ** 53 + 1, 10 ** 30):
        with pytest.raises(ValueError, match=r"batch: size \d+ is too large to split "
                                             r"\(at most 2\*\*53\)"):
            split_sizes(total, [1, 2], what="batch")


def test_offsets_are_running_sums():
    assert offsets([5, 4, 4]) == [0, 5, 9]


weights_strategy = st.lists(
    st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False),
    min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(weights=weights_strategy, extra=st.integers(min_value=0, max_value=5000))
def test_property_sizes_sum_to_total_and_are_positive(weights, extra):
    total = len(weights) + extra
    sizes = split_sizes(total, weights)
    assert sum(sizes) == total
    assert len(sizes) == len(weights)
    assert min(sizes) >= 1


@settings(max_examples=300, deadline=None)
@given(weights=weights_strategy, extra=st.integers(min_value=0, max_value=5000))
def test_property_sizes_are_within_one_of_quota_when_no_part_is_clamped(weights, extra):
    total = len(weights) + extra
    quotas = [total * w / math.fsum(weights) for w in weights]
    sizes = split_sizes(total, weights)
    if all(q >= 1 for q in quotas):
        # largest remainder: floor or ceil of the quota, never further
        assert all(math.floor(q) <= s <= math.ceil(q) for q, s in zip(quotas, sizes))


@settings(max_examples=200, deadline=None)
@given(weights=weights_strategy, extra=st.integers(min_value=0, max_value=500))
def test_property_split_is_scale_invariant_and_deterministic(weights, extra):
    total = len(weights) + extra
    assert split_sizes(total, weights) == split_sizes(total, [w * 8.0 for w in weights])


@settings(max_examples=200, deadline=None)
@given(weights=weights_strategy, extra=st.integers(min_value=0, max_value=500))
def test_property_offsets_tile_the_dimension(weights, extra):
    total = len(weights) + extra
    sizes = split_sizes(total, weights)
    begins = offsets(sizes)
    assert begins[0] == 0
    assert all(b + s == nb for b, s, nb in zip(begins, sizes, begins[1:]))
    assert begins[-1] + sizes[-1] == total

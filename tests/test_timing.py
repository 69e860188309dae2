import pytest

from linattn_core.bench.timing import loglog_slope, median_times


def test_median_times_interleaves_and_returns_medians():
    calls = []
    times = median_times(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1
    )
    assert calls == ["a", "b"] * 4
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())


@pytest.mark.parametrize("power", [0.5, 1.0, 2.0, 3.0])
def test_loglog_slope_recovers_the_exponent(power):
    sizes = [100, 300, 1000, 3000]
    assert loglog_slope(sizes, [7 * n**power for n in sizes]) == pytest.approx(power, rel=1e-12)


@pytest.mark.parametrize(
    ("sizes", "values", "match"),
    [
        ([1], [1], "at least 2"),
        ([1, 2], [1], "same length"),
        ([0, 2], [1, 1], "positive"),
        ([2, 2], [1, 3], "not all be equal"),
    ],
)
def test_loglog_slope_rejects_bad_input(sizes, values, match):
    with pytest.raises(ValueError, match=match):
        loglog_slope(sizes, values)


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"repeats": 0}, "repeats"), ({"warmup": -1}, "warmup")]
)
def test_median_times_rejects_bad_counts(kwargs, match):
    with pytest.raises(ValueError, match=match):
        median_times({"f": lambda: None}, **kwargs)

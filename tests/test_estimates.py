"""The estimator (`headway.domain.estimates`), without I/O: its track, its rate, its blend with a
job's usual duration, late; and, replayed, the report streams of `bench.estimator`
against tqdm's own estimator fed the same reports."""

from __future__ import annotations

import pytest

from bench.estimator import POINTS, STREAMS, errors
from headway.domain.estimates import ANCHORS, Track, estimate, follow, late, rate
from headway.domain.jobs import Usual

S = 1_000_000  # a second, in the track's microseconds


def fed(reports: list[tuple[float, float, float | None]]) -> Track | None:
    track = None
    for at_s, current, end in reports:
        track = follow(track, round(at_s * S), current, end)
    return track


def test_a_track_starts_again_when_current_goes_down_end_changes_or_the_clock_goes_back():
    track = fed([(0, 0, 100), (10, 10, 100), (20, 20, 100)])
    assert track is not None and track.reports == 3
    for after in ([(30, 5, 100)], [(30, 30, 200)], [(15, 25, 100)]):
        again = fed([(0, 0, 100), (10, 10, 100), (20, 20, 100), *after])
        assert (
            again is not None
            and again.reports == 1
            and again.anchors
            == (
                round(after[0][0] * S),
                after[0][1],
            )
        )
    assert follow(track, 40 * S, None, 100) is None  # a report without a count


def test_a_burst_of_reports_is_one_anchor_and_a_track_keeps_a_few():
    burst = [(10 + n * 0.001, n, 1000) for n in range(500)]
    track = fed([(0, 0, 1000), *burst])
    assert track is not None and track.reports == 501
    assert len(track.anchors) <= 6  # the start, the burst's first and its newest
    steady = fed([(n, n, 10_000) for n in range(5000)])
    assert steady is not None and len(steady.anchors) == 2 * ANCHORS


def test_a_steady_reporter_has_a_rate_from_its_second_report_a_second_or_more_apart():
    assert rate(fed([(0, 0, 1000)]), 2 * S) is None  # one report
    assert rate(fed([(0, 0, 1000), (2, 1, 1000)]), 2 * S) == pytest.approx(0.5)  # 0.1 %, 2 s
    assert rate(fed([(0, 0, 1000), (1, 1, 1000)]), 1 * S) == pytest.approx(1.0)
    halves = fed([(n / 2, n, 1000) for n in range(3)])  # every 0.5 s: a second by the third
    assert rate(halves, 1 * S) == pytest.approx(2.0)
    assert rate(fed([(0, 0, 1000), (0.5, 1, 1000)]), 1 * S) is None  # too close to tell
    # Minutes apart, two reports may be a stall and a restart: a third tells.
    assert rate(fed([(0, 0, 1000), (600, 8, 1000)]), 600 * S) is None
    assert rate(fed([(0, 0, 1000), (600, 8, 1000), (660, 9, 1000)]), 660 * S) is not None


def test_bursts_and_uneven_reports_wait_for_three_spanning_ten_seconds_or_two_percent():
    burst = fed([(0, 0, 1000), (0.001, 5, 1000), (0.002, 9, 1000)])
    assert rate(burst, 1 * S) is None
    uneven = [(0, 0, 1000), (0.2, 1, 1000), (3, 2, 1000)]  # 0.2 s, then 2.8 s
    assert rate(fed(uneven), 3 * S) is None
    assert rate(fed([*uneven, (10, 3, 1000)]), 10 * S) == pytest.approx(0.3)  # 10 s
    assert rate(fed([(0, 0, 100), (0.1, 1, 100), (2, 2, 100)]), 2 * S) == pytest.approx(1.0)
    assert rate(fed([(0, 0, None), (0.1, 1, None), (12, 12, None)]), 12 * S) == pytest.approx(1.0)


def test_the_rate_falls_while_the_reporter_is_silent():
    track = fed([(n, n, 1000) for n in range(0, 100, 2)])
    rates = [rate(track, (98 + wait) * S) for wait in (0, 2, 10, 60, 600)]
    assert rates[0] == pytest.approx(1.0) and rates[1] == pytest.approx(1.0)
    assert rates[2] > rates[3] > rates[4] > 0  # never frozen, never negative


def test_a_finished_task_has_nothing_left_and_is_not_late():
    found = estimate(
        now_us=500 * S,
        created_at_us=0,
        track=None,
        current=None,
        end=None,
        usual=Usual(10, 20, 5),
        finished_at_us=400 * S,
    )
    assert (found.remaining_s, found.eta_us, found.late, found.elapsed_s) == (
        0.0,
        400 * S,
        False,
        400,
    )


def test_a_task_without_end_has_a_rate_and_no_time_left():
    track = fed([(n, n * 3, None) for n in range(0, 30, 3)])
    found = estimate(now_us=27 * S, created_at_us=0, track=track, current=81, end=None, usual=None)
    assert found.rate_per_s == pytest.approx(3.0)
    assert (found.remaining_s, found.eta_us, found.basis) == (None, None, None)


def test_the_basis_says_what_the_time_left_comes_from():
    track = fed([(n, n, 100) for n in range(0, 21, 2)])  # 1 a second, 20 of 100 done
    usual = Usual(100, 110, 5)
    by_rate = estimate(now_us=20 * S, created_at_us=0, track=track, current=20, end=100, usual=None)
    assert by_rate.basis == "rate" and by_rate.remaining_s == pytest.approx(80)
    assert by_rate.eta_us == 100 * S
    blend = estimate(now_us=20 * S, created_at_us=0, track=track, current=20, end=100, usual=usual)
    assert blend.basis == "blend" and blend.remaining_s == pytest.approx(80)
    early = estimate(now_us=5 * S, created_at_us=0, track=None, current=5, end=100, usual=usual)
    assert early.basis == "usual" and early.remaining_s == pytest.approx(95)
    assert early.rate_per_s is None
    none = estimate(now_us=5 * S, created_at_us=0, track=None, current=5, end=100, usual=None)
    assert (none.basis, none.remaining_s) == (None, None)


def test_late_beyond_the_usual_bound_or_by_its_estimated_total_once_a_tenth_is_done():
    usual = Usual(600, 700, 20)  # bound: max(1.2 x 700, 600 + 60) = 840 s
    assert not late(839, None, None, usual) and late(841, None, None, usual)
    assert late(200, 700, 0.2, usual)  # 200 + 700 > 840, a fifth done
    assert not late(200, 700, 0.05, usual)  # not yet a tenth done
    assert not late(10_000, 1, 0.99, None)  # no usual duration: never late
    assert late(62, None, None, Usual(1, 1, 5))  # p50 + 60 s for short jobs


@pytest.mark.parametrize("stream", list(STREAMS))
def test_replayed_streams_err_less_than_tqdm_with_history_and_about_as_much_without(stream):
    """The golden replay: once a job has history, a smaller error than tqdm's at every
    point; without, within 5 points of it (where neither can know: a warm-up, a change
    of pace, an `end` still growing)."""
    medians = errors(stream)  # the 25 runs of the benchmark's table
    for n, point in enumerate(POINTS):
        at = f"{stream} at {point:.0%}"
        assert medians["with history"][n] < medians["tqdm"][n], at
        assert medians["without"][n] <= medians["tqdm"][n] + 0.05, at


@pytest.mark.parametrize("end", [1e308, 1.7e308, 1e22, 1e20])
def test_a_time_left_too_big_to_say_is_unknown(end):
    """A pace that reaches `end` past year 9999 (or never, in floats): no time left and no
    instant by the rate, never an error; the job's usual duration, if any, still speaks."""
    track = fed([(0, 1, end), (5.5, 2, end), (11, 3, end)])
    found = estimate(now_us=11 * S, created_at_us=0, track=track, current=3, end=end, usual=None)
    assert found.rate_per_s is not None
    assert (found.remaining_s, found.eta_us, found.basis) == (None, None, None)
    usual = Usual(60, 70, 5)
    found = estimate(now_us=11 * S, created_at_us=0, track=track, current=3, end=end, usual=usual)
    assert found.remaining_s == pytest.approx(49) and found.eta_us == pytest.approx(60 * S)


def test_a_rate_too_big_to_say_is_unknown():
    end = 1.7e308
    track = fed([(0, 0, end), (0.000001, 1e307, end), (0.000002, 1.5e307, end)])
    found = estimate(now_us=1, created_at_us=0, track=track, current=1.5e307, end=end, usual=None)
    assert (found.rate_per_s, found.remaining_s, found.eta_us) == (None, None, None)

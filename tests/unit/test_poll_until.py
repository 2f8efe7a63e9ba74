"""The one bounded wait every stage uses: asked at once, backs off to its cap, gives up after its bound."""

from __future__ import annotations

import pytest

from tasks.errors import NotReadyYet
from tasks.stages.clock import Clock, poll_until


class Ticking:
    def __init__(self):
        self.t, self.sleeps = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds

    def clock(self) -> Clock:
        return Clock(sleep=self.sleep, monotonic=lambda: self.t)


def test_the_first_good_answer_is_returned_without_sleeping():
    time = Ticking()
    assert poll_until(lambda: "ready", bound_s=10, clock=time.clock()) == "ready"
    assert time.sleeps == []


def test_none_and_false_mean_not_yet_but_other_falsy_answers_are_answers():
    answers = iter([None, False, 0])
    assert poll_until(lambda: next(answers), bound_s=10, clock=Ticking().clock()) == 0


def test_it_backs_off_to_its_cap_and_gives_up_at_the_first_answer_after_the_bound():
    time, asked = Ticking(), []
    with pytest.raises(NotReadyYet, match="still pending at 19 s"):
        poll_until(lambda: asked.append(time.t), bound_s=16, clock=time.clock(), interval_s=1.0, max_interval_s=4.0,
                   what=lambda: f"still pending at {time.t:g} s")
    assert time.sleeps == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert asked == [0.0, 1.0, 3.0, 7.0, 11.0, 15.0, 19.0]  # 15 < 16 waits once more; 19 >= 16 stops


def test_an_answer_at_exactly_the_bound_is_the_last_one_asked_for():
    time, asked = Ticking(), []
    with pytest.raises(NotReadyYet):
        poll_until(lambda: asked.append(time.t), bound_s=4, clock=time.clock(), interval_s=2.0)
    assert asked == [0.0, 2.0, 4.0]


def test_without_a_cap_the_interval_stays_fixed():
    time = Ticking()
    with pytest.raises(NotReadyYet):
        poll_until(lambda: None, bound_s=6, clock=time.clock(), interval_s=2.0)
    assert time.sleeps == [2.0, 2.0, 2.0]


def test_a_probe_that_raises_ends_the_wait_with_its_error():
    def stopped():
        raise RuntimeError("instance stopped")

    with pytest.raises(RuntimeError, match="instance stopped"):
        poll_until(stopped, bound_s=60, clock=Ticking().clock())

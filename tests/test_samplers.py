"""sweeper.samplers.AfterEarlierAsks: a trial samples once the running trials numbered before it
have their params, never waits on later ones, and waits no longer than its bound."""

from __future__ import annotations

import optuna
from optuna.distributions import FloatDistribution

from sweeper.samplers import AfterEarlierAsks, earlier_asks

SPACE = {"x": FloatDistribution(0.0, 1.0)}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.now += s


def _wrapper(clock: _Clock, max_wait_s: float = 5.0) -> AfterEarlierAsks:
    return AfterEarlierAsks(optuna.samplers.RandomSampler(seed=0), max_wait_s=max_wait_s,
                            poll_s=0.5, sleep=clock.sleep, clock=clock)


def test_a_trial_waits_for_the_ask_before_it_and_no_longer() -> None:
    study = optuna.create_study()
    first, second = study.ask(), study.ask()  # both RUNNING, neither sampled yet
    clock = _Clock()
    sampler = _wrapper(clock)

    def sleep(s: float) -> None:
        clock.sleep(s)
        first.suggest_float("x", 0.0, 1.0)  # the earlier runner's ask lands meanwhile

    sampler._sleep = sleep  # noqa: SLF001 - the test's own hook
    waited = sampler.wait_for_earlier_asks(study, study.trials[second.number], SPACE)
    assert clock.sleeps == 1 and waited == 0.5


def test_a_trial_never_waits_for_a_later_one() -> None:
    study = optuna.create_study()
    first = study.ask()
    study.ask()  # a later trial, not sampled yet
    clock = _Clock()
    assert _wrapper(clock).wait_for_earlier_asks(study, study.trials[first.number], SPACE) == 0
    assert clock.sleeps == 0


def test_the_wait_is_bounded_when_the_earlier_runner_never_samples() -> None:
    study = optuna.create_study()
    study.ask()  # its runner died before sampling
    second = study.ask()
    clock = _Clock()
    waited = _wrapper(clock, max_wait_s=5.0).wait_for_earlier_asks(
        study, study.trials[second.number], SPACE)
    assert waited == 5.0 and clock.sleeps == 10


def test_earlier_asks_are_the_running_trials_before_without_every_param() -> None:
    study = optuna.create_study()
    done, partial, bare, later = study.ask(), study.ask(), study.ask(), study.ask()
    done.suggest_float("x", 0.0, 1.0)
    done.suggest_float("y", 0.0, 1.0)
    partial.suggest_float("x", 0.0, 1.0)
    space = {**SPACE, "y": FloatDistribution(0.0, 1.0)}
    running = study.get_trials(deepcopy=False)
    assert earlier_asks(running, later.number, space) == [partial.number, bare.number]


def test_it_samples_what_the_wrapped_sampler_samples() -> None:
    study = optuna.create_study(sampler=AfterEarlierAsks(optuna.samplers.TPESampler(
        seed=1, n_startup_trials=2)))
    plain = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=2))
    for s in (study, plain):
        s.optimize(lambda t: (t.suggest_float("x", -1.0, 1.0) - 0.3) ** 2, n_trials=6)
    assert [t.params for t in study.trials] == [t.params for t in plain.trials]

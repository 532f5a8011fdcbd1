"""PBT's pure decisions: quantiles, donors, perturbations (trial_runner/pbt_policy.py), and
the lineage's one-line form (sweeper/pbt_lineage.py)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeper.pbt_lineage import describe, segment
from sweeper.spec.model import Parameter
from sweeper.spec.pbt_model import PbtOptions
from trial_runner.pbt_policy import (
    choose_donor,
    perturb,
    perturb_value,
    quantile_size,
    quantiles,
    resample,
    rng_for,
)


@pytest.mark.parametrize("n, q, k", [(0, 0.25, 0), (1, 0.25, 0), (2, 0.25, 1), (3, 0.25, 1),
                                     (4, 0.25, 1), (5, 0.25, 2), (8, 0.25, 2), (9, 0.5, 4),
                                     (4, 0.0, 0)])
def test_quantile_size_is_rays_rule(n: int, q: float, k: int) -> None:
    assert quantile_size(n, q) == k


def test_bottom_and_top_by_value_and_direction() -> None:
    entries = [(0.4, 10), (0.1, 11), (0.9, 12), (0.5, 13), (0.2, 14)]
    assert quantiles(entries, 0.25, maximize=False) == ([13, 12], [11, 14])
    assert quantiles(entries, 0.25, maximize=True) == ([14, 11], [12, 13])


def test_ties_rank_the_older_trial_first_and_too_few_members_decide_nothing() -> None:
    assert quantiles([(1.0, 5), (1.0, 3), (1.0, 4), (1.0, 6)], 0.25,
                     maximize=False) == ([6], [3])
    assert quantiles([(0.3, 1)], 0.5, maximize=False) == ([], [])
    assert quantiles([], 0.5, maximize=False) == ([], [])


def test_the_donor_is_a_top_member_chosen_the_same_way_for_the_same_seed_index_step() -> None:
    top = [7, 3, 9]
    picks = {choose_donor(top, rng_for(1, 2, s)) for s in range(40)}
    assert picks == {3, 7, 9}  # uniform over the top: every one is picked
    assert choose_donor(top, rng_for(1, 2, 3)) == choose_donor([9, 3, 7], rng_for(1, 2, 3))
    assert [choose_donor(top, rng_for(0, i, 3)) for i in range(20)] == \
        [choose_donor(top, rng_for(0, i, 3)) for i in range(20)]


FLOAT = Parameter("lr", "float", low=1e-4, high=1e-1, log=True)
STEPPED = Parameter("wd", "float", low=0.0, high=1.0, step=0.25)
INT = Parameter("layers", "int", low=1, high=8)
CHOICE = Parameter("opt", "categorical", choices=("sgd", "adam", "rmsprop"))


def test_a_number_is_scaled_clipped_and_snapped() -> None:
    rng = random.Random(0)
    assert perturb_value(FLOAT, 0.01, 1.2, rng) == pytest.approx(0.012)
    assert perturb_value(FLOAT, 0.09, 1.2, rng) == pytest.approx(0.1)  # clipped to high
    assert perturb_value(STEPPED, 0.5, 1.2, rng) == 0.5  # 0.6 snaps back to the grid
    assert perturb_value(STEPPED, 0.75, 1.2, rng) == 1.0
    assert perturb_value(INT, 2, 1.2, rng) == 3  # 2.4 rounds to 2: it moves one step up
    assert perturb_value(INT, 2, 0.8, rng) == 1
    assert perturb_value(INT, 8, 1.2, rng) == 8  # at its bound it stays


def test_a_choice_moves_to_an_adjacent_one() -> None:
    seen = {perturb_value(CHOICE, "adam", 1.2, random.Random(s)) for s in range(20)}
    assert seen == {"sgd", "rmsprop"}
    assert {perturb_value(CHOICE, "sgd", 1.2, random.Random(s)) for s in range(20)} == \
        {"sgd", "adam"}


@given(st.integers(0, 2**32), st.sampled_from([FLOAT, STEPPED, INT, CHOICE]))
def test_perturbed_and_resampled_values_stay_in_the_space(seed: int, p: Parameter) -> None:
    rng = random.Random(seed)
    value = resample(p, rng)
    for _ in range(5):
        value = perturb_value(p, value, rng.choice((0.8, 1.2)), rng)
        for v in (value, resample(p, rng)):
            if p.choices is not None:
                assert v in p.choices
                continue
            assert p.low <= v <= p.high
            if p.type == "int":
                assert isinstance(v, int)
            if p.step is not None:
                k = (v - p.low) / p.step
                assert math.isclose(k, round(k), abs_tol=1e-9)


def test_perturb_resamples_with_its_probability_and_keeps_gating_parameters() -> None:
    gated = Parameter("momentum", "float", low=0.0, high=0.99, when=(("opt", ("sgd",)),))
    params = {"opt": "sgd", "momentum": 0.5}
    never = PbtOptions(resample_probability=0.0, perturbation_factors=(2.0, 2.0))
    out = perturb(params, (CHOICE, gated), never, random.Random(1))
    assert out == {"opt": "sgd", "momentum": 0.99}  # 'opt' gates momentum: kept
    always = PbtOptions(resample_probability=1.0)
    draws = {perturb({"lr": 0.01}, (FLOAT,), always, random.Random(s))["lr"] for s in range(20)}
    assert len(draws) == 20 and all(1e-4 <= d <= 0.1 for d in draws)  # fresh samples
    assert 0.012 not in draws and 0.008 not in draws


def test_the_lineage_in_a_few_words() -> None:
    first = segment(0, {"a": 1.0})
    assert describe([first]) == "-"
    assert describe(None) == "-" and describe("x") == "-"
    one = [first, segment(8, {"a": 0.8}, 3, 7)]
    assert describe(one) == "from #3 at step 7"
    assert describe([*one, segment(12, {"a": 0.9}, 5, 11)]) == \
        "from #5 at step 11 (2 copies)"

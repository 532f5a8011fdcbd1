"""Growing a sweep: more ``trials`` extends the same study, new indexes after the old ones;
every other change (fewer trials included) is still refused, naming the command that fixes it."""

from __future__ import annotations

import threading

import pytest
from optuna.trial import TrialState

from sweeper.errors import SpecError
from sweeper.protocol import HASH_ATTR, INDEX_ATTR, SPEC_ATTR
from sweeper.space import grid_point, grid_size, random_point
from sweeper.study import create_or_resume, load_sweep, open_storage
from tests.support.helpers import make_spec


def _planned(storage_url: str, name: str) -> dict[int, dict[str, object]]:
    sweep = load_sweep(open_storage(storage_url), name)
    trials = sweep.study().get_trials(deepcopy=False)
    indexes = [t.user_attrs[INDEX_ATTR] for t in trials]
    assert len(indexes) == len(set(indexes)), "one trial per index"
    return {t.user_attrs[INDEX_ATTR]: t.system_attrs["fixed_params"] for t in trials}


def test_raising_trials_of_a_random_sweep_extends_the_same_study(storage_url: str) -> None:
    storage = open_storage(storage_url)
    small = make_spec(name="grow-r", method="random", trials=4)
    sweep, _ = create_or_resume(storage, small)
    first = storage.attempts(sweep.study_id, 0)[0]
    assert storage.claim(first.trial_id)
    storage.set_trial_state_values(first.trial_id, TrialState.COMPLETE, [0.5])

    big = make_spec(name="grow-r", method="random", trials=9)
    grown, created = create_or_resume(storage, big)
    assert not created and grown.study_id == sweep.study_id and grown.grown_from == 4
    planned = _planned(storage_url, "grow-r")
    assert sorted(planned) == list(range(9))
    assert planned == {i: random_point(big, i) for i in range(9)}  # set i: (seed, i) only
    numbers = {t.user_attrs[INDEX_ATTR]: t.number for t in grown.study().get_trials()}
    assert [numbers[i] for i in range(4, 9)] == list(range(4, 9))  # after the old ones
    assert grown.study().get_trials()[0].state == TrialState.COMPLETE  # the old one stays
    attrs = storage.get_study_user_attrs(sweep.study_id)
    assert attrs[HASH_ATTR] == big.spec_hash and attrs[SPEC_ATTR]["trials"] == 9
    assert load_sweep(storage, "grow-r").spec == big
    again, _ = create_or_resume(storage, big)  # the grown spec again: a plain resume
    assert again.grown_from is None and len(_planned(storage_url, "grow-r")) == 9


def test_a_grid_grows_up_to_its_size_point_i_staying_point_i(storage_url: str) -> None:
    storage = open_storage(storage_url)
    create_or_resume(storage, make_spec(name="grow-g", trials=3))
    full = make_spec(name="grow-g")  # trials defaults to the grid size (10)
    grown, _ = create_or_resume(storage, full)
    assert grown.grown_from == 3 and full.trials == grid_size(full) == 10
    assert _planned(storage_url, "grow-g") == {i: grid_point(full, i) for i in range(10)}


def test_tpe_grows_without_enqueueing(storage_url: str) -> None:
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec(name="grow-t", method="tpe", trials=3))
    grown, _ = create_or_resume(storage, make_spec(name="grow-t", method="tpe", trials=5))
    assert grown.grown_from == 3 and grown.spec.trials == 5
    assert sweep.study().get_trials() == []
    assert load_sweep(storage, "grow-t").spec.trials == 5


def test_lowering_trials_is_refused_and_says_so(storage_url: str) -> None:
    storage = open_storage(storage_url)
    create_or_resume(storage, make_spec(name="shrink", method="random", trials=6))
    with pytest.raises(SpecError) as e:
        create_or_resume(storage, make_spec(name="shrink", method="random", trials=4))
    assert e.value.field == "trials"
    assert "has 6 indexes; trials: 4 would shrink it (a sweep can grow, not shrink)" in str(e.value)
    assert "`sweeper delete shrink`" in str(e.value)
    assert len(_planned(storage_url, "shrink")) == 6


def test_more_trials_plus_another_change_is_still_a_changed_spec(storage_url: str) -> None:
    storage = open_storage(storage_url)
    create_or_resume(storage, make_spec(name="both", method="random", trials=4))
    with pytest.raises(SpecError) as e:
        create_or_resume(storage, make_spec(name="both", method="random", trials=8, seed=1))
    message = str(e.value)
    assert "a different sweep named 'both' already exists in this storage (trials, seed " \
           "differ)" in message
    assert "`sweeper delete both`" in message and "change `name:` in the spec" in message
    assert len(_planned(storage_url, "both")) == 4


def test_concurrent_launches_of_a_grown_spec_enqueue_once(storage_url: str) -> None:
    create_or_resume(open_storage(storage_url), make_spec(name="grow-c", method="random",
                                                          trials=20))
    big = make_spec(name="grow-c", method="random", trials=50)
    errors: list[BaseException] = []
    grown: list[int | None] = []
    barrier = threading.Barrier(4)

    def launch() -> None:
        try:
            barrier.wait(timeout=30)
            grown.append(create_or_resume(open_storage(storage_url), big)[0].grown_from)
        except BaseException as e:  # noqa: BLE001 - collected and asserted empty below
            errors.append(e)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(grown, key=str) == [20, None, None, None]  # one launch grew it
    assert _planned(storage_url, "grow-c") == {i: random_point(big, i) for i in range(50)}

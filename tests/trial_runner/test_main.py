from __future__ import annotations

import pytest

from trial_runner import exitcodes
from trial_runner.main import combine, job_indexes


def test_job_id_and_fallback() -> None:
    assert job_indexes({"JOB_ID": "3"}, 10) == [3]
    assert job_indexes({"JOB_COMPLETION_INDEX": "2"}, 10) == [2]
    assert job_indexes({"JOB_ID": "1", "JOB_COMPLETION_INDEX": "9"}, 10) == [1]


def test_indexes_per_pod_and_sparse_maps() -> None:
    assert job_indexes({"JOB_ID": "1", "SWEEPER_INDEXES_PER_POD": "4"}, 10) == [4, 5, 6, 7]
    assert job_indexes({"JOB_ID": "2", "SWEEPER_INDEXES_PER_POD": "4"}, 10) == [8, 9]
    env = {"JOB_ID": "1", "SWEEPER_INDEX_MAP": "3,7,12"}
    assert job_indexes(env, 20) == [7]
    assert job_indexes(dict(env, SWEEPER_INDEXES_PER_POD="2"), 20) == [12]


@pytest.mark.parametrize("env", [{}, {"JOB_ID": "x"}, {"JOB_ID": "10"},
                                 {"JOB_ID": "0", "SWEEPER_INDEX_MAP": "30"}])
def test_bad_job_ids(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        job_indexes(env, 10)


def test_combined_exit_code_prefers_what_a_retry_can_fix() -> None:
    assert combine([0, 0]) == exitcodes.OK
    assert combine([0, exitcodes.NO_RETRY]) == exitcodes.NO_RETRY
    assert combine([exitcodes.NO_RETRY, exitcodes.RETRY]) == exitcodes.RETRY
    assert combine([exitcodes.RETRY, exitcodes.CONFIG]) == exitcodes.CONFIG

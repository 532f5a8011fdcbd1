"""The orchestrator/runner contract: index map, exit codes, worker messages, env settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeper import protocol


def test_job_id_and_fallback() -> None:
    assert protocol.job_indexes_from_env({"JOB_ID": "3"}, 10) == [3]
    assert protocol.job_indexes_from_env({"JOB_COMPLETION_INDEX": "2"}, 10) == [2]
    assert protocol.job_indexes_from_env({"JOB_ID": "1", "JOB_COMPLETION_INDEX": "9"}, 10) == [1]


def test_indexes_per_pod_and_sparse_maps() -> None:
    env = {"JOB_ID": "1", "SWEEPER_INDEXES_PER_POD": "4"}
    assert protocol.job_indexes_from_env(env, 10) == [4, 5, 6, 7]
    assert protocol.job_indexes_from_env(dict(env, JOB_ID="2"), 10) == [8, 9]
    env = {"JOB_ID": "1", "SWEEPER_INDEX_MAP": "3,7,12"}
    assert protocol.job_indexes_from_env(env, 20) == [7]
    assert protocol.job_indexes_from_env(dict(env, SWEEPER_INDEXES_PER_POD="2"), 20) == [12]


@pytest.mark.parametrize("env", [{}, {"JOB_ID": "x"}, {"JOB_ID": "10"}, {"JOB_ID": "-1"},
                                 {"JOB_ID": "0", "SWEEPER_INDEX_MAP": "30"},
                                 {"JOB_ID": "0", "SWEEPER_INDEX_MAP": "1,a"},
                                 {"JOB_ID": "0", "SWEEPER_INDEXES_PER_POD": "0"}])
def test_bad_job_ids(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        protocol.job_indexes_from_env(env, 10)


@given(n=st.integers(1, 300), per_pod=st.integers(1, 20), data=st.data())
def test_index_map_chunks_cover_the_universe_once_and_invert(n: int, per_pod: int,
                                                            data: st.DataObject) -> None:
    sparse = data.draw(st.booleans())
    mapping = tuple(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))) \
        if sparse else None
    if mapping is not None:
        assert protocol.decode_index_map(protocol.encode_index_map(mapping)) == mapping
    assert protocol.decode_index_map("") is None
    c = protocol.completions(per_pod, mapping, n)
    covered = [i for k in range(c) for i in protocol.chunk(k, per_pod, mapping, n)]
    assert covered == list(mapping if mapping is not None else range(n))
    assert protocol.chunk(c, per_pod, mapping, n) == []
    for k in range(c):
        for i in protocol.chunk(k, per_pod, mapping, n):
            assert protocol.job_index_of(i, per_pod, mapping, n) == k
    outside = n if mapping is None else next(i for i in range(n + 1) if i not in mapping)
    assert protocol.job_index_of(outside, per_pod, mapping, n) is None


def test_combined_exit_code_prefers_what_stops_or_retries() -> None:
    assert protocol.combine_exit_codes([]) == protocol.EXIT_OK
    assert protocol.combine_exit_codes([0, 0]) == protocol.EXIT_OK
    assert protocol.combine_exit_codes([0, protocol.EXIT_NO_RETRY]) == protocol.EXIT_NO_RETRY
    assert protocol.combine_exit_codes([protocol.EXIT_NO_RETRY, protocol.EXIT_RETRY]) == \
        protocol.EXIT_RETRY
    assert protocol.combine_exit_codes([protocol.EXIT_RETRY, protocol.EXIT_CONFIG]) == \
        protocol.EXIT_CONFIG


def test_exit_codes_are_the_values_built_images_and_pod_failure_policies_use() -> None:
    # Trial images already built and Jobs already submitted depend on these numbers.
    assert (protocol.EXIT_OK, protocol.EXIT_RETRY, protocol.EXIT_NO_RETRY,
            protocol.EXIT_CONFIG) == (0, 1, 3, 4)


MESSAGES: list[protocol.Message] = [
    protocol.Run(7), protocol.Exit(), protocol.Ready(), protocol.Start(3, 41, 12),
    protocol.Done(3, protocol.EXIT_OK, "COMPLETE", 12), protocol.Done(5, 1, "FAIL", None),
    protocol.Error("bad entrypoint: module 'x' has no attribute 'y'"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_worker_messages_round_trip_as_one_line(msg: protocol.Message) -> None:
    line = protocol.encode_message(msg)
    assert line.endswith("\n") and line.count("\n") == 1
    assert protocol.parse_message(line) == msg


def test_a_multi_line_error_stays_one_line() -> None:
    line = protocol.encode_message(protocol.Error("first\nsecond  third"))
    assert line == "error first second third\n"


@pytest.mark.parametrize("line", ["", "run", "run x", "start 1 2", "done 1 2 3", "hello 1",
                                  "ready now"])
def test_unknown_worker_lines_are_refused(line: str) -> None:
    with pytest.raises(ValueError, match="not a worker message"):
        protocol.parse_message(line)


def test_env_settings_and_their_defaults() -> None:
    assert protocol.grace_period_s({}) == protocol.DEFAULT_GRACE_PERIOD_S == 30.0
    assert protocol.grace_period_s({"SWEEPER_GRACE_PERIOD": "7.5"}) == 7.5
    assert protocol.grace_period_s({"SWEEPER_GRACE_PERIOD": " "}) == 30.0
    with pytest.raises(ValueError, match=r"\$SWEEPER_GRACE_PERIOD must be a number"):
        protocol.grace_period_s({"SWEEPER_GRACE_PERIOD": "soon"})


def test_secret_env_is_reserved() -> None:
    assert set(protocol.SECRET_ENV) <= set(protocol.RESERVED_ENV)

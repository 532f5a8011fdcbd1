"""The orchestrator/runner contract: index map, exit codes, worker messages, env settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeper import messages, protocol


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


MESSAGES: list[messages.Message] = [
    messages.Run(7), messages.Exit(), messages.Ready(), messages.Start(3, 41, 12),
    messages.Done(3, protocol.EXIT_OK, "COMPLETE", 12), messages.Done(5, 1, "FAIL", None),
    messages.Error("bad entrypoint: module 'x' has no attribute 'y'"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_worker_messages_round_trip_as_one_line(msg: messages.Message) -> None:
    line = messages.encode_message(msg)
    assert line.endswith("\n") and line.count("\n") == 1
    assert messages.parse_message(line) == msg


def test_a_multi_line_error_stays_one_line() -> None:
    line = messages.encode_message(messages.Error("first\nsecond  third"))
    assert line == "error first second third\n"


@pytest.mark.parametrize("line", ["", "run", "run x", "start 1 2", "done 1 2 3", "hello 1",
                                  "ready now"])
def test_unknown_worker_lines_are_refused(line: str) -> None:
    with pytest.raises(ValueError, match="not a worker message"):
        messages.parse_message(line)


def test_env_settings_and_their_defaults() -> None:
    assert protocol.grace_period_s({}) == protocol.DEFAULT_GRACE_PERIOD_S == 30.0
    assert protocol.grace_period_s({"SWEEPER_GRACE_PERIOD": "7.5"}) == 7.5
    assert protocol.grace_period_s({"SWEEPER_GRACE_PERIOD": " "}) == 30.0
    with pytest.raises(ValueError, match=r"\$SWEEPER_GRACE_PERIOD must be a number"):
        protocol.grace_period_s({"SWEEPER_GRACE_PERIOD": "soon"})


def test_secret_env_is_reserved() -> None:
    assert set(protocol.SECRET_ENV) <= set(protocol.RESERVED_ENV)


# --------------------------------------------------------------------------- pinned decisions
# Each test below kills a mutant that survived `make mutate` (docs/development.md).


def test_state_key_keeps_eight_characters_of_the_uid_and_old_sweeps_their_name() -> None:
    assert protocol.state_key("digits", "0123456789abcdef") == "digits-01234567"
    assert protocol.state_key("digits", None) == "digits"
    assert protocol.state_key("digits", "") == "digits"


def test_log_headers_round_trip_and_other_lines_are_not_headers() -> None:
    header = protocol.LogHeader(index=12, attempt=0, trial_number=345)
    line = protocol.encode_log_header(header)
    assert line == "=== sweeper: index 12, attempt 0, trial #345 ===\n"
    assert protocol.parse_log_header(line) == header
    assert protocol.parse_log_header("  " + line) == header
    for other in ("", "=== sweeper: index 1, attempt 0 ===", "index 1, attempt 0, trial #2",
                  line.replace("12", "x")):
        assert protocol.parse_log_header(other) is None


def test_a_promoted_segments_header_names_its_rung_and_round_trips() -> None:
    header = protocol.LogHeader(index=3, attempt=1, trial_number=7, promoted_from=2)
    line = protocol.encode_log_header(header)
    assert line == "=== sweeper: index 3, attempt 1, trial #7, promoted from rung 2 ===\n"
    assert protocol.parse_log_header(line) == header
    assert protocol.parse_log_header(line.replace("rung 2", "rung 0")) == \
        protocol.LogHeader(3, 1, 7, 0)  # rung 0 is a rung, not "not promoted"
    for other in (line.replace("rung 2", "rung"), line.replace(", promoted", " promoted"),
                  line.replace(" ===", ", promoted from rung 2 ===")):
        assert protocol.parse_log_header(other) is None


def test_a_negative_job_index_or_per_pod_below_one_runs_nothing() -> None:
    # the slice alone would hand these a chunk: [-6:-3] and [0:-1] are not empty
    assert protocol.chunk(-2, 3, None, 10) == []
    assert protocol.chunk(0, -1, None, 10) == []
    assert protocol.chunk(0, 0, None, 10) == []


def test_completions_of_a_sparse_map_count_its_entries_not_the_sweep() -> None:
    assert protocol.completions(2, (1, 5, 9), 100) == 2
    assert protocol.completions(2, None, 100) == 50


def test_map_entries_at_both_ends_of_the_sweep() -> None:
    env = {"JOB_ID": "0", "SWEEPER_INDEX_MAP": "0,9"}
    assert protocol.job_indexes_from_env(dict(env, SWEEPER_INDEXES_PER_POD="2"), 10) == [0, 9]
    with pytest.raises(ValueError, match=r"^index 10 is outside the sweep \(0\.\.9\)$"):
        protocol.job_indexes_from_env(dict(env, SWEEPER_INDEX_MAP="10"), 10)


def test_an_empty_indexes_per_pod_means_one() -> None:
    env = {"JOB_ID": "1", "SWEEPER_INDEXES_PER_POD": ""}
    assert protocol.job_indexes_from_env(env, 10) == [1]


@pytest.mark.parametrize(("env", "message"), [
    ({"JOB_ID": "x"}, r"^JOB_ID must be a non-negative integer, got 'x'$"),
    ({"JOB_ID": "0", "SWEEPER_INDEXES_PER_POD": "0"}, r"^SWEEPER_INDEXES_PER_POD must be >= 1$"),
    ({"JOB_ID": "10"}, r"^JOB_ID 10 is outside the sweep \(10 indexes, 1 per pod\)$"),
    ({"JOB_ID": "2", "SWEEPER_INDEX_MAP": "3,4", "SWEEPER_INDEXES_PER_POD": "1"},
     r"^JOB_ID 2 is outside the sweep \(2 indexes, 1 per pod\)$"),
])
def test_a_wrong_environment_says_what_is_wrong(env: dict[str, str], message: str) -> None:
    """The runner logs these lines as they are: the pod's log is all a user sees."""
    with pytest.raises(ValueError, match=message):
        protocol.job_indexes_from_env(env, 10)


def test_an_unparsable_index_map_or_line_is_quoted_up_to_80_characters() -> None:
    with pytest.raises(ValueError, match=r"^index map must be comma-separated integers, "
                                         r"got '1,a'$"):
        protocol.decode_index_map("1,a")
    with pytest.raises(ValueError, match=r"got '1,a{78}'$"):
        protocol.decode_index_map("1," + "a" * 100)
    with pytest.raises(ValueError, match=r"^not a worker message: 'x{80}'$"):
        messages.parse_message("x" * 100)


def test_done_without_a_trial_is_minus_one_on_the_wire_and_trial_0_is_a_trial() -> None:
    assert messages.encode_message(messages.Done(5, 1, "FAIL", None)) == "done 5 1 FAIL -1\n"
    first = messages.Done(0, protocol.EXIT_OK, "COMPLETE", 0)
    assert messages.encode_message(first) == "done 0 0 COMPLETE 0\n"
    assert messages.parse_message("done 0 0 COMPLETE 0\n") == first


def test_an_open_ended_slot_runs_every_stride_th_index() -> None:
    env = {"JOB_ID": "1", protocol.ENV_INDEX_STRIDE: "3"}
    assert protocol.job_indexes_from_env(env, 10) == [1, 4, 7]
    for bad in ("0", "x", "1"):  # the slot must be below the stride
        with pytest.raises(ValueError, match=protocol.ENV_INDEX_STRIDE):
            protocol.job_indexes_from_env({**env, protocol.ENV_INDEX_STRIDE: bad}, 10)

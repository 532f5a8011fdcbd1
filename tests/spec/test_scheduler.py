"""The ``scheduler:`` section in the stored record and the hash, and where the backend needs
durable checkpoints."""

from __future__ import annotations

from sweeper.spec import durable_checkpoints_error, load_stored
from tests.support.helpers import make_spec

ASHA = {"type": "asha", "min_resource": 1, "max_resource": 27}


def test_a_scheduler_is_in_the_record_and_the_hash_only_when_set() -> None:
    plain, asha = make_spec(), make_spec(scheduler=ASHA)
    assert "scheduler" not in plain.to_dict()  # earlier sweeps keep their record and hash
    assert asha.to_dict()["scheduler"] == {"type": "asha", "mode": "promotion",
                                           "min_resource": 1, "max_resource": 27,
                                           "reduction_factor": 3}
    assert load_stored(asha.to_dict()) == asha
    assert len({plain.spec_hash, asha.spec_hash,
                make_spec(scheduler={**ASHA, "reduction_factor": 2}).spec_hash}) == 3


def test_durable_checkpoints_are_needed_only_with_a_scheduler() -> None:
    assert durable_checkpoints_error(make_spec()) is None
    e = durable_checkpoints_error(make_spec(scheduler=ASHA))
    assert e is not None and e.field == "scheduler"
    assert durable_checkpoints_error(make_spec(
        scheduler=ASHA, artifacts={"store": "s3", "bucket": "ckpts"})) is None
    volume = {"name": "ckpt", "mount_path": "/ckpt", "pvc": "ckpt"}
    assert durable_checkpoints_error(make_spec(scheduler=ASHA, kubernetes={
        "volumes": [volume], "checkpoint_volume": "ckpt"})) is None

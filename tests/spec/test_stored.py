"""The stored spec (the sweep record) is loaded, not validated again: ``load_stored`` gives back
the spec ``to_dict`` wrote, hash included, without building a sampler or counting a grid; it
refuses a record a newer sweeper wrote, and names the field of a damaged one."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.errors import SpecError
from sweeper.spec import SweepSpec, load_spec, load_stored, parse_spec, parse_spec_dict
from sweeper.spec.model import SCHEMA_KEY, STORED_SCHEMA
from sweeper.spec.stored import stored_schema
from tests.support.helpers import make_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(REPO.glob("search_spaces/*.yaml"))

#: Every section set, most keys given: kubernetes pass-through objects and every volume kind,
#: S3 artifacts and data, a conditional parameter, a command with metrics from a file.
RICH = """
name: rich
method: tpe
trials: 20
objective: [{metric: loss, direction: minimize}, {metric: acc, direction: maximize}]
sampler: {n_startup_trials: 5}
trial:
  command: [python, train.py, "--lr", "{lr}", "--opt", "{opt}"]
  fixed: {epochs: 3, warm: null, nested: {beta: null}}
  retries: 2
  timeout: 1h
  resources: {gpu: 1, cpu: "2", memory: 4Gi}
  metrics: {file: "m-{index}.jsonl"}
parameters:
  opt: {type: categorical, choices: [sgd, adam]}
  lr: {type: float, low: 0.0001, high: 0.1, log: true}
  mom: {type: float, low: 0.0, high: 0.9, step: 0.1, when: {opt: sgd}}
  layers: {type: int, values: [1, 2, 4]}
  width: {type: int, low: 8, high: 64, step: 8}
kubernetes:
  image: reg.example/t:1
  namespace: ml
  node_selector: {pool: gpu}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  image_pull_secrets: [regcred]
  env: {A: "1"}
  indexes_per_pod: 2
  active_deadline: 2h
  labels: {team: x}
  annotations: {note: y}
  priority_class: high
  runtime_class: nvidia
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {
    nodeSelectorTerms: [{matchExpressions: [{key: a, operator: In, values: [b]}]}]}}}
  termination_grace_period: 60
  shm_size: 2Gi
  scratch_size: 20Gi
  gpu_resource: nvidia.com/mig-1g.10gb
  cpu_limit: true
  volumes:
    - {name: ckpt, mount_path: /ckpt, pvc: ckpt-claim}
    - {name: nfsv, mount_path: /nfs, nfs: {server: 10.0.0.1, path: /export}}
    - {name: tmp, mount_path: /tmp2, empty_dir: {size_limit: 1Gi}}
    - {name: tmp3, mount_path: /tmp3, empty_dir: {}}
    - {name: cfg, mount_path: /cfg, config_map: cfg, read_only: true}
    - {name: sec, mount_path: /sec, secret: creds}
  checkpoint_volume: ckpt
  pod_template: {spec: {containers: [{name: trial, env: [{name: X, value: "1"}]}]}}
  storage_proxy: proxy:13000
artifacts: {store: s3, bucket: my-bucket, prefix: runs/, endpoint_url: "http://minio:9000",
            region: us-east-1, credentials_secret: s3-creds}
data: {s3: "s3://my-bucket/data"}
stop: {max_failed_trials: 3, max_duration: 3h}
"""


def _specs() -> list[tuple[str, SweepSpec]]:
    out = [(p.stem, load_spec(p)) for p in EXAMPLES]
    out.append(("rich", parse_spec(RICH, source="rich.yaml")))
    out.append(("grid", make_spec()))
    out.append(("random-stop", make_spec(method="random", trials=9,
                                         stop={"value": 0.5, "patience": 3})))
    out.append(("pruned-data-path", make_spec(
        method="tpe", trials=12, pruner={"type": "median", "n_startup_trials": 2},
        data={"path": "/datasets/x"}, artifacts={"store": "filesystem", "path": "/art"},
        description="a description")))
    metrics = {"format": r"(?P<name>\w+)=(?P<value>.+)"}
    out.append(("command", make_spec(trial={"command": ["python", "t.py", "{a}"],
                                            "metrics": metrics})))
    out.append(("command-wandb", make_spec(trial={
        "command": ["python", "t.py"], "metrics": {"wandb": {"a": "opt.a"}}})))
    return out


SPECS = _specs()


def _stored(spec: SweepSpec) -> dict[str, Any]:
    """What the study's user attrs (or the ConfigMap) hold: the record, through JSON."""
    record: dict[str, Any] = json.loads(json.dumps(spec.to_dict()))
    return record


def _old_hash(record: dict[str, Any]) -> str:
    """spec_hash as it was computed before records carried a schema version (a copy of the
    formula, so a change to it that would rename existing sweeps fails here)."""
    identity = {k: record[k] for k in ("name", "method", "objective", "trials", "seed",
                                       "sampler", "pruner", "parameters")}
    identity["trial"] = {k: record["trial"].get(k) for k in ("entrypoint", "command", "fixed")}
    identity["parameter_order"] = list(record["parameters"])
    if "scheduler" in record:  # newer than the formula (issue 29): only a spec that sets one
        identity["scheduler"] = record["scheduler"]
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(("name", "spec"), SPECS, ids=[n for n, _ in SPECS])
def test_every_spec_round_trips_through_its_record(name: str, spec: SweepSpec) -> None:
    record = _stored(spec)
    assert record[SCHEMA_KEY] == STORED_SCHEMA
    again = load_stored(record, source="<study x>")
    assert again == spec
    assert again.to_dict() == spec.to_dict()
    assert json.dumps(again.to_dict()) == json.dumps(spec.to_dict())  # key order too
    assert again.spec_hash == spec.spec_hash
    assert again.source == "<study x>"
    assert parse_spec_dict(record) == again  # the validator reads the same record alike


@pytest.mark.parametrize(("name", "spec"), SPECS, ids=[n for n, _ in SPECS])
def test_an_old_record_without_a_version_loads_and_hashes_the_same(name: str,
                                                                   spec: SweepSpec) -> None:
    old = _stored(spec)
    del old[SCHEMA_KEY]
    assert stored_schema(old) == 1
    again = load_stored(old, source="<study old>")
    assert again == spec
    assert again.spec_hash == spec.spec_hash == _old_hash(old)


def test_hashes_of_existing_sweeps_are_pinned() -> None:
    """Computed by the code before the version stamp: a sweep keeps its identity."""
    assert make_spec().spec_hash == "a41b8543d911c8f4"
    assert make_spec(method="tpe", trials=12).spec_hash == "6f2b17d3038ac099"
    assert parse_spec(RICH).spec_hash == "715cc4115d707e74"


def test_a_normalised_spec_is_still_a_valid_spec_file() -> None:
    """The stamp does not make a rendered spec.json unreadable as a spec."""
    spec = make_spec()
    assert parse_spec(json.dumps(spec.to_dict())) == spec
    assert parse_spec(yaml.safe_dump(spec.to_dict(), sort_keys=False)) == spec


# --------------------------------------------------------------------------- no validation


def test_loading_builds_no_sampler_and_counts_no_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the stored spec was validated again")

    records = [(spec, _stored(spec)) for _, spec in SPECS]
    from sweeper.spec import _sampler, _validate, grid, registry

    for module, name in ((registry, "build_sampler"), (registry, "sampler_class"),
                         (registry, "options_class"), (registry, "build_pruner"),
                         (registry, "pruner_class"), (grid, "grid_size_of"),
                         (_validate, "grid_size_of"), (_sampler, "grid_size_of")):
        monkeypatch.setattr(module, name, boom)
    for spec, record in records:
        assert load_stored(record) == spec
    # The patches do catch validation: the validator needs both.
    with pytest.raises(AssertionError, match="validated again"):
        parse_spec_dict(_stored(make_spec()))  # a grid: counted
    with pytest.raises(AssertionError, match="validated again"):
        parse_spec_dict(_stored(make_spec(method="tpe", trials=12,
                                          sampler={"n_startup_trials": 3})))


def test_a_stored_record_is_not_checked_as_a_users_spec() -> None:
    """What the validator would refuse today (a grid of more points than trials allow...) is
    the record's business: it was valid when written."""
    record = _stored(make_spec())
    record["trials"] = 10_000  # more than the grid's 10 points
    assert load_stored(record).trials == 10_000
    with pytest.raises(SpecError, match="exceeds the grid size"):
        parse_spec_dict(record)


# --------------------------------------------------------------------------- refusals


def test_a_record_of_a_newer_sweeper_is_refused_with_one_clear_error() -> None:
    record = _stored(make_spec())
    record[SCHEMA_KEY] = STORED_SCHEMA + 1
    message = (f"stored by a newer sweeper (schema {STORED_SCHEMA + 1}, this one reads up to "
               f"{STORED_SCHEMA}): upgrade the runner image")
    with pytest.raises(SpecError) as e:
        load_stored(record, source="<study t-sweep>")
    assert e.value.exit_code == 2
    assert str(e.value) == f"<study t-sweep>: {message}"
    for parse in (parse_spec_dict, lambda r: parse_spec(json.dumps(r))):
        with pytest.raises(SpecError, match=r"stored by a newer sweeper \(schema 2"):
            parse(record)


@pytest.mark.parametrize("bad", [0, -1, "1", 1.5, True, None])
def test_a_version_that_is_not_a_positive_integer_is_refused(bad: Any) -> None:
    record = _stored(make_spec())
    record[SCHEMA_KEY] = bad
    with pytest.raises(SpecError, match=rf"^<s>: {SCHEMA_KEY}: expected a schema version"):
        load_stored(record, source="<s>")


def _without(record: dict[str, Any], *path: str) -> dict[str, Any]:
    out = copy.deepcopy(record)
    at = out
    for key in path[:-1]:
        at = at[key]
    del at[path[-1]]
    return out


@pytest.mark.parametrize(("path", "field"), [
    (("name",), "name"),
    (("method",), "method"),
    (("objective",), "objective"),
    (("trials",), "trials"),
    (("parameters",), "parameters"),
    (("trial",), "trial"),
    (("parameters", "a", "low"), "parameters.a.low"),
    (("parameters", "a", "type"), "parameters.a.type"),
])
def test_a_missing_required_key_names_the_field(path: tuple[str, ...], field: str) -> None:
    record = _without(_stored(make_spec()), *path)
    with pytest.raises(SpecError) as e:
        load_stored(record, source="<study t-sweep>")
    assert e.value.field == field
    assert f"missing required key {path[-1]!r}" in e.value.message
    assert str(e.value).startswith(f"<study t-sweep>: {field}: ")


def test_a_damaged_record_names_the_field() -> None:
    record = _stored(make_spec())
    cases: list[tuple[str, Any, str]] = [
        ("trials", "ten", "trials: expected an integer, got string 'ten'"),
        ("method", "annealing", "method: must be one of grid, random"),
        ("bogus", 1, "bogus: unknown key in the stored record"),
        ("trial", {"fixed": {}}, "trial: the stored record needs exactly one of entrypoint"),
        ("kubernetes", {"volumes": [{"name": "v", "mount_path": "/v"}]},
         "kubernetes.volumes[0]: a stored volume has exactly one of"),
        ("data", {"s3": "gs://x"}, "data.s3: expected s3://bucket/prefix"),
        ("objective", [], "objective: no objective in the stored record"),
    ]
    for key, value, message in cases:
        with pytest.raises(SpecError, match=rf"^<r>: {message}".replace("[", r"\[")
                           .replace("]", r"\]")):
            load_stored({**record, key: value}, source="<r>")
    with pytest.raises(SpecError, match=r"^<r>: the stored spec must be a mapping, got a list"):
        load_stored([], source="<r>")  # type: ignore[arg-type]


def test_trial_code_null_survives_the_stored_form() -> None:
    """``trial.code: null`` (the image holds the code) is kept in the record, not dropped with
    the other nulls: a resume of the stored spec packs nothing."""
    from sweeper.spec import parse_spec
    from sweeper.spec.stored import load_stored

    text = """
name: x
method: grid
objective: {metric: loss, direction: minimize}
trial: {entrypoint: "a:b", code: CODE}
parameters:
  x: {type: int, values: [0]}
"""
    image, default = (parse_spec(text.replace("CODE", c)) for c in ("null", "."))
    assert image.to_dict()["trial"]["code"] is None
    assert load_stored(image.to_dict()).trial.code is None
    assert "code" not in default.to_dict()["trial"]
    assert load_stored(default.to_dict()).trial.code == "."

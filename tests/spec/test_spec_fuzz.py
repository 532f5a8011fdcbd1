"""Property test: whatever text the spec loader is given, it returns a SweepSpec or raises
SpecError with a one-line message; never any other exception (that would be a traceback in
front of a user). Valid results must also survive the sweep-record round trip."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweeper.errors import SpecError
from sweeper.space import planned_sets
from sweeper.spec import SweepSpec, parse_spec, parse_spec_dict

REPO = Path(__file__).resolve().parents[2]
VALID = {p.name: p.read_text(encoding="utf-8") for p in sorted(REPO.glob("search_spaces/*.yaml"))}
#: SWEEPER_FUZZ_EXAMPLES=20000 for a longer hunt; 300 keeps `make test` at a few seconds.
FUZZ = settings(max_examples=int(os.environ.get("SWEEPER_FUZZ_EXAMPLES", "300")),
                deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Real spec words, so random documents and renames often reach deep validation code.
WORDS = sorted({
    "name", "description", "method", "objective", "trials", "parallelism", "seed", "sampler",
    "pruner", "storage", "trial", "parameters", "kubernetes", "artifacts", "metric",
    "direction", "entrypoint", "command", "fixed", "retries", "timeout", "resources", "gpu",
    "cpu", "memory", "type", "low", "high", "step", "log", "choices", "values", "image",
    "image_pull_policy", "namespace", "env", "indexes_per_pod", "tolerations", "node_selector",
    "active_deadline", "ttl_after_finished", "n_startup_trials", "percentile", "grid", "random",
    "tpe", "median", "hyperband", "minimize", "maximize", "float", "int", "categorical",
})

scalars = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
           | st.floats() | st.sampled_from(WORDS) | st.text(max_size=12)
           | st.sampled_from(["30m", "1h30m", "0", "-1s", "{x}", "{", "a:b", "sqlite:///x.db",
                              "postgresql://u:p@h/db", "mysql://h", "Always", "SWEEPER_X",
                              "1e400", ".nan", "4Gi", "500m"]))
keys = st.sampled_from(WORDS) | st.text(max_size=8)
documents = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=30)


def check(text: str) -> None:
    try:
        spec = parse_spec(text, source="fuzz.yaml")
    except SpecError as e:
        rendered = str(e)
        assert rendered.startswith("fuzz.yaml"), rendered
        assert "\n" not in rendered and "\r" not in rendered, rendered
        return
    assert isinstance(spec, SweepSpec)
    # The normalised form is what the study stores; it must read back as the same sweep.
    again = parse_spec_dict(spec.to_dict(), source="<study>")
    assert again == spec
    assert again.spec_hash == spec.spec_hash
    assert again.to_dict() == spec.to_dict()
    if not spec.is_adaptive:
        list(itertools.islice(planned_sets(spec), 3))


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


def parent_of(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    check(text)


@FUZZ
@given(documents)
def test_random_yaml_documents(doc: Any) -> None:
    check(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.data())
def test_mutated_valid_specs(name: str, data: st.DataObject) -> None:
    doc = yaml.safe_load(VALID[name])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(paths(doc)), label="path")
        parent, last = parent_of(doc, path), path[-1]
        op = data.draw(st.sampled_from(["delete", "replace", "rename"]), label="op")
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = data.draw(documents, label="value")
        elif isinstance(parent, dict):
            new = data.draw(keys, label="new key")
            parent[new] = parent.pop(last)
        if not paths(doc):
            break
    check(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.data())
def test_text_edits_of_valid_specs(name: str, data: st.DataObject) -> None:
    lines = VALID[name].splitlines(keepends=True)
    op = data.draw(st.sampled_from(["duplicate", "delete", "truncate", "insert", "indent"]))
    i = data.draw(st.integers(0, len(lines) - 1), label="line")
    if op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "delete":
        del lines[i]
    elif op == "truncate":
        text = "".join(lines)
        lines = [text[:data.draw(st.integers(0, len(text)), label="cut")]]
    elif op == "insert":
        lines[i] = data.draw(st.text(max_size=20), label="text") + lines[i]
    else:
        lines[i] = "  " + lines[i]
    check("".join(lines))


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_unmutated_specs_are_valid(name: str) -> None:
    assert isinstance(parse_spec(VALID[name], source=name), SweepSpec)

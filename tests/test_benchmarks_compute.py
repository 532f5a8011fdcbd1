"""The compute section's pure parts: the synthetic learning-curve family, the epoch ledger and
epochs to a target, the specs of its variants, and its rows' verdicts. The measurement itself
runs in tests/test_benchmarks_smoke.py (tiny size, PostgreSQL)."""

from __future__ import annotations

import itertools
import math
import random
import types
from pathlib import Path
from typing import Any

import pytest

from benchmarks import compute, compute_figures, curves
from benchmarks.compute_plain import PlainContext


def _cfg(lr: float, width: float, warmup: float) -> dict[str, float]:
    return {"lr": lr, "width": width, "warmup": warmup}


# --------------------------------------------------------------------------- the family


def test_curves_fall_from_the_start_to_their_floor() -> None:
    cfg = _cfg(0.03, 0.4, 0.2)
    values = [curves.quality(cfg, s) for s in range(0, 40)]
    assert values[0] == pytest.approx(curves.START)
    assert all(a > b for a, b in itertools.pairwise(values))
    assert curves.quality(cfg, 1000) == pytest.approx(curves.floor(cfg), abs=1e-9)


def test_the_known_optimum_is_the_lowest_floor_of_the_space() -> None:
    rng = random.Random(3)
    assert curves.floor(curves.OPTIMUM) == pytest.approx(curves.BEST_FLOOR)
    for _ in range(500):
        cfg = _cfg(10 ** rng.uniform(-4, 0), rng.random(), rng.random())
        assert curves.floor(cfg) >= curves.BEST_FLOOR


def test_warmup_slows_a_curve_without_moving_its_end() -> None:
    fast, slow = _cfg(0.01, 1.0, 0.0), _cfg(0.01, 1.0, 1.0)
    assert curves.floor(fast) == curves.floor(slow)
    assert curves.quality(slow, 3) > curves.quality(fast, 3)


def test_early_ranking_is_only_partly_that_of_the_end() -> None:
    """The interesting case for promotion vs stopping: early steps predict the end somewhat,
    more so the later the step."""
    rho = curves.rank_agreement((1, 3, 9), 27, n=400)
    assert 0.0 < rho[0] < rho[1] < rho[2] < 0.95
    rng = random.Random(0)
    cfg = curves.random_configuration(rng)
    assert 1e-4 <= cfg["lr"] <= 1.0 and 0.0 <= cfg["width"] <= 1.0


def test_noise_is_a_function_of_seed_index_and_step() -> None:
    assert curves.noise(1, 2, 3) == curves.noise(1, 2, 3)
    assert len({curves.noise(1, 2, 3), curves.noise(1, 2, 4), curves.noise(1, 3, 3),
                curves.noise(2, 2, 3)}) == 4


def test_spearman() -> None:
    assert curves.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert curves.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(curves.spearman([1.0], [2.0]))


# --------------------------------------------------------------------------- the ledger


def _ev(t: float, index: int, step: int, score: float) -> curves.Event:
    return curves.Event(t, index, step, score, score)


def test_epochs_to_target_counts_every_step_before_the_first_hit_in_time_order() -> None:
    events = [_ev(3.0, 1, 1, 0.4), _ev(1.0, 0, 1, 0.9), _ev(2.0, 0, 2, 0.7),
              _ev(4.0, 1, 2, 0.2), _ev(5.0, 0, 3, 0.1)]
    assert curves.epochs_to_target(events, 0.5) == 3  # (0,1), (0,2), then (1,1) hits
    assert curves.epochs_to_target(events, 0.2) == 4
    assert curves.epochs_to_target(events, 0.05) is None


def test_top_fraction_score_is_the_kth_best() -> None:
    scores = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0, 1.1]
    assert curves.top_fraction_score(scores, 0.1) == 0.2  # ceil(1.1) = 2nd best
    assert curves.top_fraction_score([0.3], 0.1) == 0.3
    with pytest.raises(ValueError):
        curves.top_fraction_score([], 0.1)


def test_best_by_index_and_steps_per_index() -> None:
    events = [_ev(1, 0, 1, 0.9), _ev(2, 0, 2, 0.5), _ev(3, 1, 1, 0.7), _ev(4, 0, 3, 0.6)]
    assert curves.best_by_index(events) == {0: 0.5, 1: 0.7}
    assert curves.steps_per_index(events) == {0: 3, 1: 1}


def test_ledger_files_of_several_processes_read_back_in_time_order(tmp_path: Path) -> None:
    curves.record(tmp_path, 0, 1, 0.9, 0.8)
    (tmp_path / "other.jsonl").write_text(
        '{"t": 0.0, "i": 5, "s": 1, "v": 2.0, "q": 1.9}\n')
    curves.record(tmp_path, 0, 2, 0.5, 0.4)
    events = curves.read_ledger(tmp_path)
    assert [(e.index, e.step) for e in events] == [(5, 1), (0, 1), (0, 2)]
    assert events[1].value == 0.9 and events[1].score == 0.8


class _Ctx:
    """A trial context that records what the curve trial does and may stop it."""

    def __init__(self, params: dict[str, Any], index: int, resume: tuple[Any, int] | None,
                 prune_at: int | None = None) -> None:
        self.params, self.index = params, index
        self.resume, self.prune_at = resume, prune_at
        self.reports: list[tuple[int, float]] = []
        self.saved: list[int] = []
        self.last: tuple[Any, int] | None = None

    def load_checkpoint(self) -> tuple[Any, int] | None:
        return self.resume

    def report(self, step: int, **metrics: float) -> None:
        self.reports.append((step, metrics["val_loss"]))

    def save_checkpoint(self, state: Any, step: int) -> None:
        self.saved.append(step)
        self.last = (state, step)

    def should_prune(self) -> bool:
        return self.prune_at is not None and self.reports[-1][0] >= self.prune_at


def test_curve_trial_resumes_after_its_checkpoint_and_counts_each_step_once(
        tmp_path: Path) -> None:
    params = {**_cfg(0.01, 0.5, 0.0), "steps": 9, "seed": 4, "ledger": str(tmp_path)}
    whole = _Ctx(params, index=2, resume=None)
    curves.curve(whole)  # type: ignore[arg-type]
    assert [s for s, _ in whole.reports] == list(range(1, 10)) == whole.saved

    ledger = tmp_path / "second"
    ledger.mkdir()
    first = _Ctx({**params, "ledger": str(ledger)}, index=2, resume=None, prune_at=3)
    from optuna import TrialPruned

    with pytest.raises(TrialPruned):
        curves.curve(first)  # type: ignore[arg-type]
    assert first.last is not None and first.last[1] == 3
    second = _Ctx({**params, "ledger": str(ledger)}, index=2, resume=first.last)
    value = curves.curve(second)  # type: ignore[arg-type]
    # The paused-and-resumed trial reports what the whole one did, step for step.
    assert first.reports + second.reports == whole.reports
    assert value == whole.reports[-1][1]
    assert [e.step for e in curves.read_ledger(ledger)] == list(range(1, 10))
    assert curves.read_ledger(ledger)[0].score == curves.quality(params, 1)
    assert [e.score for e in curves.read_ledger(ledger)] == pytest.approx(
        [curves.quality(params, s) for s in range(1, 10)], rel=1e-12)


def test_a_curve_resumed_under_new_params_goes_on_from_its_checkpoints_loss(
        tmp_path: Path) -> None:
    # PBT: a member copies a donor's checkpoint and trains on under perturbed params; the loss
    # bends from the donor's, it does not jump to the new params' own curve at that step.
    donor = {**_cfg(0.01, 1.0, 0.0), "steps": 6, "seed": 1, "ledger": str(tmp_path)}
    copied = ({"step": 3, "loss": curves.quality(donor, 3)}, 3)
    worse = {**donor, "lr": 1e-4}
    member = _Ctx(worse, index=0, resume=copied)
    curves.curve(member)  # type: ignore[arg-type]
    scores = [e.score for e in curves.read_ledger(tmp_path)]
    assert len(scores) == 3
    assert scores[0] == pytest.approx(curves.advance(worse, curves.quality(donor, 3)))
    assert scores[0] < curves.quality(worse, 4)  # the donor's progress is kept
    assert scores[-1] > curves.quality(donor, 6)  # and the worse lr slows what follows


def test_the_plain_context_reports_the_metric_to_the_optuna_trial() -> None:
    seen: list[tuple[float, int]] = []
    trial = types.SimpleNamespace(report=lambda v, s: seen.append((v, s)),
                                  should_prune=lambda: True)
    ctx = PlainContext(trial, {"x": 1}, 3, "val_loss")
    ctx.report(2, val_loss=0.5, val_accuracy=0.9)
    assert seen == [(0.5, 2)] and ctx.should_prune() and ctx.load_checkpoint() is None


# --------------------------------------------------------------------------- specs and rows


@pytest.mark.parametrize("task", ["curve", "digits"])
def test_every_variant_is_a_valid_sweep_of_the_same_sets(task: str) -> None:
    from sweeper.space import random_point
    from sweeper.spec import parse_spec_dict

    size = compute.task_size(compute.SIZES["default"], task)
    parsed = {v: parse_spec_dict(compute.spec_for(task, v, size, 7, "/tmp/l"), source="<t>")
              for v in compute.TASK_VARIANTS[task]
              if v != "asha" or compute.asha_available() is None}
    assert {p.pruner.type for v, p in parsed.items() if "hyperband" in v} == {"hyperband"}
    assert parsed["none"].pruner.type == "none"
    points = {v: [random_point(p, i) for i in range(p.trials)] for v, p in parsed.items()}
    n = len(points["none"])  # budgeted ASHA's pool is longer: its first N are the same
    assert all(pts[:n] == points["none"][:len(pts)] for pts in points.values())
    assert ("pbt" in parsed) == (task == "curve")


def test_the_pbt_variant_is_a_population_of_w_that_perturbs_every_few_steps() -> None:
    spec = compute.spec_for("curve", "pbt", SIZED, 0, "/tmp/l")
    assert spec["trials"] == spec["parallelism"] == SIZED["w"] < SIZED["trials"]
    assert spec["pruner"] == {"type": "none"}
    assert spec["scheduler"] == {"type": "pbt", "max_resource": SIZED["steps"],
                                 "perturbation_interval": compute.PBT_INTERVAL}


SIZED = compute.task_size(compute.SIZES["default"], "curve")


def test_the_asha_variant_asks_for_promotion_with_the_pruners_resources() -> None:
    spec = compute.spec_for("curve", "asha", SIZED, 0, "/tmp/l")
    hb = compute.spec_for("curve", "hyperband", SIZED, 0, "/tmp/l")
    assert spec["pruner"] == {"type": "none"}
    assert spec["scheduler"] == {"type": "asha", "mode": "promotion",
                                 **{k: v for k, v in hb["pruner"].items() if k != "type"}}


def _seed(target: float, **to: tuple[int | None, int, int]) -> dict[str, Any]:
    return {"target": target, "variants": {
        v: {"to_target": t, "epochs": e, "best": 0.1, "counts": {"PRUNED": pruned}}
        for v, (t, e, pruned) in to.items()}}


SIZE = {"trials": 27, "steps": 27, "w": 8, "seeds": 2}


#: The variants of the ASHA verdict (PBT's figures are not part of it).
JUDGED = tuple(v for v in compute_figures.VARIANTS if v not in ("pbt", "budget_asha"))


def _verdict(per_seed: list[dict[str, Any]]) -> compute_figures.Row:
    rows = compute_figures.rows_for("curve", SIZE, per_seed, JUDGED,
                            compute_figures.not_in_effect(per_seed, JUDGED))
    assert len(rows) == len(JUDGED) + 1
    return rows[-1]


def test_asha_passes_at_half_hyperbands_epochs_and_misses_above() -> None:
    common = {"none": (300, 729, 0), "plain_hyperband": (200, 400, 9)}
    passing = [_seed(0.2, **common, hyperband=(200, 400, 9), asha=(100, 300, 18)),
               _seed(0.2, **common, hyperband=(300, 400, 9), asha=(140, 300, 18))]
    row = _verdict(passing)
    assert row.status == "PASS" and row.figures["ratio"] == pytest.approx(240 / 500)
    missing = [_seed(0.2, **common, hyperband=(200, 400, 9), asha=(100, 300, 18)),
               _seed(0.2, **common, hyperband=(300, 400, 9), asha=(160, 300, 18))]
    assert _verdict(missing).status == "MISS"


def test_asha_that_misses_the_target_on_a_seed_misses() -> None:
    common = {"none": (300, 729, 0), "plain_hyperband": (200, 400, 9)}
    per_seed = [_seed(0.2, **common, hyperband=(200, 400, 9), asha=(10, 300, 18)),
                _seed(0.2, **common, hyperband=(300, 400, 9), asha=(None, 300, 18))]
    assert _verdict(per_seed).status == "MISS"


def test_an_asha_run_that_paused_nothing_is_reported_not_judged() -> None:
    common = {"none": (300, 729, 0), "hyperband": (200, 400, 9),
              "plain_hyperband": (200, 400, 9)}
    per_seed = [_seed(0.2, **common, asha=(10, 729, 0)), _seed(0.2, **common, asha=(10, 729, 0))]
    row = _verdict(per_seed)
    assert row.status == "INFO" and "no trial was paused" in row.measured


def test_figures_take_the_target_from_the_no_pruning_run() -> None:
    # "none" trains indexes 0..9 (index i ends at (10 - i) / 10); the best tenth: index 9.
    none = {"counts": {"COMPLETE": 10},
            "events": [[i, 1, (10 - i) / 10] for i in range(10)]}
    hyperband = {"counts": {"COMPLETE": 2, "PRUNED": 8},
                 "events": [[9, 1, 0.5], [0, 1, 0.2], [3, 1, 0.1], [3, 2, 0.05]]}
    asha = {"counts": {"COMPLETE": 1, "PRUNED": 9},
            "events": [[9, 1, 0.5], [8, 1, 0.3], [9, 3, 0.15]]}
    f = compute_figures.figures({"none": none, "hyperband": hyperband, "asha": asha})
    assert f["target"] == pytest.approx(0.1) and f["good"] == [9]
    assert f["variants"]["none"] == {"epochs": 10, "to_target": 10, "best": pytest.approx(0.1),
                                     "counts": none["counts"], "good_epochs": [1],
                                     "to_asha_best": 10}
    assert f["variants"]["hyperband"]["to_target"] == 3
    assert f["variants"]["hyperband"]["good_epochs"] == [1]
    assert f["variants"]["asha"]["to_target"] is None
    assert f["variants"]["asha"]["good_epochs"] == [2]  # epochs trained, not its last step
    # compute at equal score: ASHA's best (0.15), reached by hyperband at its 3rd epoch
    assert f["asha_best"] == 0.15
    assert f["variants"]["hyperband"]["to_asha_best"] == 3
    assert f["variants"]["asha"]["to_asha_best"] == 3


def test_the_pbt_note_compares_with_hyperband_on_the_seeds_both_reached() -> None:
    common = {"none": (300, 729, 0), "plain_hyperband": (200, 400, 9), "asha": (90, 240, 18)}
    per_seed = [_seed(0.2, **common, hyperband=(200, 400, 9), pbt=(50, 216, 0)),
                _seed(0.2, **common, hyperband=(300, 500, 9), pbt=(None, 216, 0))]
    note = compute_figures.pbt_note("curve", per_seed)
    assert "432 epochs in all (0.48x sweeper hyperband's 900)" in note
    assert "reached the target in 1/2 seeds" in note
    assert "0.25x sweeper hyperband's epochs to the target on the 1 seed(s)" in note
    rows = compute_figures.rows_for("curve", SIZE, per_seed, (*JUDGED, "pbt"), None)
    assert [r.status for r in rows if "PBT" in r.item] == ["INFO"]


def test_the_budgeted_asha_variant_is_promotion_asha_with_a_steps_budget_over_a_pool() -> None:
    from sweeper.space import random_point
    from sweeper.spec import parse_spec_dict

    spec = compute.spec_for("curve", "budget_asha", {**SIZED, "budget": 300}, 0, "/tmp/l")
    assert spec["scheduler"]["mode"] == "promotion" and spec["budget"] == {"steps": 300}
    assert spec["trials"] == compute_figures.POOL_FACTOR * SIZED["trials"]
    pool = parse_spec_dict(spec, source="<t>")
    none = parse_spec_dict(compute.spec_for("curve", "none", SIZED, 0, "/tmp/l"), source="<t>")
    # its first N configurations are the other variants' own, in the same order
    assert [random_point(pool, i) for i in range(none.trials)] == \
        [random_point(none, i) for i in range(none.trials)]


def test_budgeted_asha_rows_judge_medians_seeds_and_the_best_loss() -> None:
    def seed(b: int | None, hb: int | None, pl: int, best_b: float, best_hb: float
             ) -> dict[str, Any]:
        out = _seed(0.2, none=(300, 729, 0), hyperband=(hb, 400, 9),
                    plain_hyperband=(pl, 400, 9), budget_asha=(b, 400, 9))
        out["variants"]["budget_asha"]["best"] = best_b
        out["variants"]["hyperband"]["best"] = best_hb
        return out

    passing = [seed(90, 200, 150, 0.1, 0.2), seed(100, 300, 150, 0.1, 0.1),
               seed(110, None, 150, 0.3, 0.2)]
    to, best = compute_figures.budget_rows("curve", SIZE, passing)
    assert to.status == "PASS" and to.figures["median"] == 100 and to.figures["reached"] == 3
    assert to.figures["ratio"] == pytest.approx(100 / 250)
    assert best.status == "PASS"  # median seed: 0.1 vs 0.2
    fewer = [seed(90, 200, 150, 0.1, 0.2), seed(None, 300, 150, 0.3, 0.1)]
    assert compute_figures.budget_rows("curve", SIZE, fewer)[0].status == "MISS"
    slower = [seed(150, 200, 150, 0.1, 0.2), seed(150, 300, 150, 0.1, 0.1)]
    assert compute_figures.budget_rows("curve", SIZE, slower)[0].status == "MISS"


def test_the_ledger_row_passes_within_one_percent() -> None:
    check = {"unit": "CPU-hours", "per": "CPUs", "w": 8, "trials": 16, "durations": 1.0}
    assert compute_figures.ledger_row({**check, "ledger": 1.009}).status == "PASS"
    assert compute_figures.ledger_row({**check, "ledger": 0.98}).status == "MISS"


# --------------------------------------------------------------------------- digits curves


#: Two configurations (a pool of 8) of 3 epochs.
DIGITS = {"w": 2, "step_s": 0.0, "trials": 2, "steps": 3, "seeds": 1}


def test_digits_curves_are_the_example_trials_reports_and_the_same_for_a_seed() -> None:
    from trial_runner.examples.digits import train

    _, trained = compute.digits_sim(DIGITS)
    curve = [trained.loss(0, 1, k) for k in (1, 2, 3)]
    # trained by turns with another configuration, in another order: the same curve
    _, again = compute.digits_sim(DIGITS)
    assert [again.loss(0, 0, 1), again.loss(0, 1, 2), again.loss(0, 0, 3)][1] == curve[1]
    # another seed's (its configurations and its torch seed) differ; asking for it drops
    # seed 0's configurations in training: one asked for more trains again from the start
    assert again.loss(1, 1, 3) != curve[2]
    assert again.epochs == 3 + 2 + 3
    assert [again.loss(0, 1, k) for k in (3, 1, 2)] == [curve[2], curve[0], curve[1]]
    assert again.epochs == 3 + 2 + 3 + 3 and again.seconds > 0
    # the example's trial of that configuration (never paused) reported the same losses
    params = {**trained.fixed(0), **compute.task_configs(
        "digits", {**DIGITS, "trials": compute.trials_of("budget_asha", DIGITS)}, 0)[1]}
    seen: list[tuple[float, int]] = []
    trial = types.SimpleNamespace(report=lambda v, s: seen.append((v, s)),
                                  should_prune=lambda: False, set_user_attr=lambda k, v: None)
    train(PlainContext(trial, params, 1, "val_loss"))  # type: ignore[arg-type]
    assert seen == [(loss, step) for step, loss in enumerate(curve)]
    assert params["epochs"] == 3 and params["seed"] == 0 and "ledger" not in params

"""``method: gp``'s sampler (sweeper._optuna_compat._gp and _gp_penalty): GPSampler with
running trials penalised locally instead of fantasised (issue 29).

The contract with Optuna (its ``_optimize_acqf`` receives ``qLogEI`` when trials run, and only
then); that a sequential sweep samples exactly as GPSampler; the penalty's shape (no effect far
from every running point, growing towards one, exactly the paper's factor at it); and that
studies the penalty does not cover keep Optuna's acquisition.
"""
# ruff: noqa: SLF001

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
import pytest
import torch
from optuna._gp import gp as gp_module
from optuna._gp import prior
from optuna._gp.search_space import SearchSpace
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.samplers import GPSampler

from sweeper._optuna_compat import LocalPenaltyGPSampler
from sweeper._optuna_compat._gp_penalty import PenalisedLogEI, lipschitz_constant

SPACE = {"x": FloatDistribution(-3.0, 3.0), "y": FloatDistribution(0.0, 2.0)}


def _objective(params: dict[str, Any]) -> float:
    return (params["x"] - 1.0) ** 2 + 3.0 * (params["y"] - 0.5) ** 2


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def _finished(n: int, directions: list[str] | None = None) -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1),
                                directions=directions or ["minimize"])
    for _ in range(n):
        trial = study.ask(SPACE)
        value = _objective(trial.params)
        second = -0.5 * value + trial.params["y"]
        study.tell(trial, value if directions is None else [value, second])
    return study


def _acqf_types(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """(what sweeper's override receives, what it hands GPSampler's optimiser), by name."""
    received: list[str] = []
    handed: list[str] = []
    optimise = GPSampler._optimize_acqf
    override = LocalPenaltyGPSampler._optimize_acqf

    def outer(self: Any, acqf: Any, best: Any) -> Any:
        received.append(type(acqf).__name__)
        return override(self, acqf, best)

    def inner(self: Any, acqf: Any, best: Any) -> Any:
        handed.append(type(acqf).__name__)
        return optimise(self, acqf, best)

    monkeypatch.setattr(LocalPenaltyGPSampler, "_optimize_acqf", outer)
    monkeypatch.setattr(GPSampler, "_optimize_acqf", inner)
    return received, handed


def test_running_trials_reach_the_optimiser_as_qlogei_and_are_penalised_instead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    received, handed = _acqf_types(monkeypatch)
    study = _finished(10)
    study.sampler = LocalPenaltyGPSampler(seed=0)
    study.ask(SPACE)  # sequential: nothing runs
    study.ask(SPACE)  # the first is still RUNNING
    assert received == ["LogEI", "qLogEI"]
    assert handed == ["LogEI", "PenalisedLogEI"]


def test_multi_objective_studies_keep_optunas_q_batch_acquisition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    received, handed = _acqf_types(monkeypatch)
    study = _finished(10, ["minimize", "minimize"])
    study.sampler = LocalPenaltyGPSampler(seed=0)
    study.ask(SPACE)
    study.ask(SPACE)
    assert received == handed == ["LogEHVI", "qLogEHVI"]


def test_constrained_studies_keep_optunas_q_batch_acquisition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    received, handed = _acqf_types(monkeypatch)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(10):
        trial = study.ask(SPACE)
        trial.set_constraint("y_below_one", trial.params["y"] - 1.0)
        study.tell(trial, _objective(trial.params))
    study.sampler = LocalPenaltyGPSampler(seed=0)
    study.ask(SPACE)
    study.ask(SPACE)
    assert received == handed == ["LogCEI", "qLogCEI"]


def test_a_sequential_sweep_samples_exactly_as_gpsampler() -> None:
    proposals = []
    for cls in (GPSampler, LocalPenaltyGPSampler):
        study = optuna.create_study(sampler=cls(seed=4, n_startup_trials=5))
        study.optimize(lambda t: _objective({k: t.suggest_float(k, d.low, d.high)
                                             for k, d in SPACE.items()}), n_trials=9)
        proposals.append([t.params for t in study.trials])
    assert proposals[0] == proposals[1]


# --------------------------------------------------------------------------- the penalty


def _fitted(points: np.ndarray, space: dict[str, Any]) -> tuple[Any, SearchSpace, float]:
    """A GP on ``points`` (normalised) scored by -objective, its search space, the best score."""
    search = SearchSpace(space)
    lows = np.array([d.low if hasattr(d, "low") else 0.0 for d in space.values()])
    highs = np.array([d.high if hasattr(d, "high") else 1.0 for d in space.values()])
    raw = lows + points * (highs - lows)
    scores = -np.array([(p[0] - 1.0) ** 2 + 3.0 * (p[1] - 0.5) ** 2 for p in raw])
    scores = (scores - scores.mean()) / scores.std()
    gpr = gp_module.fit_kernel_params(
        X=points, Y=scores, is_categorical=search.is_categorical,
        log_prior=prior.default_log_prior, minimum_noise=prior.DEFAULT_MINIMUM_NOISE_VAR,
        gpr_cache=None, deterministic_objective=False)
    return gpr, search, float(scores.max())


@pytest.fixture
def penalised() -> tuple[PenalisedLogEI, Any, float, torch.Tensor]:
    points = np.random.RandomState(0).rand(12, 2)
    gpr, search, best = _fitted(points, SPACE)
    running = torch.tensor([[0.62, 0.22]], dtype=torch.float64)  # near the optimum (1, 0.5)
    return PenalisedLogEI(gpr, search, best, running), gpr, best, running


def test_the_penalty_at_a_running_point_is_the_papers_factor(
        penalised: tuple[PenalisedLogEI, Any, float, torch.Tensor]) -> None:
    acqf, gpr, best, running = penalised
    with torch.no_grad():
        mean, var = gpr.posterior(running)
        expected = torch.special.log_ndtr((best - mean) / var.sqrt())
        got = acqf.log_penalty(running[0])
    assert float(got) == pytest.approx(float(expected[0]), rel=1e-6)
    assert float(got) < math.log(0.9)  # a point the sampler would pick is held down


def test_the_penalty_fades_with_distance_and_is_nil_far_away(
        penalised: tuple[PenalisedLogEI, Any, float, torch.Tensor]) -> None:
    acqf, _, _, running = penalised
    ray = [running[0] + torch.tensor([0.3, 0.7], dtype=torch.float64) * t
           for t in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4)]
    with torch.no_grad():
        values = [float(acqf.log_penalty(x)) for x in ray]
        log_ei = acqf._log_ei.eval_acqf(ray[-1])
        total = acqf.eval_acqf(ray[-1])
    assert values == sorted(values) and values[0] < values[-1]
    assert values[-1] > -1e-6
    assert float(total) == pytest.approx(float(log_ei), abs=1e-6)


def test_the_lipschitz_estimate_is_the_steepest_slope_in_the_kernels_metric() -> None:
    points = np.random.RandomState(0).rand(12, 2)
    gpr, search, _ = _fitted(points, SPACE)
    estimate = lipschitz_constant(gpr, search)
    # finite differences of the posterior mean, in the same metric, on a grid: none steeper
    scales = gpr.length_scales
    h = 1e-5
    steepest = 0.0
    for u in np.linspace(0.0, 1.0, 21):
        for v in np.linspace(0.0, 1.0, 21):
            x = torch.tensor([[u, v], [u + h, v], [u, v + h]], dtype=torch.float64)
            with torch.no_grad():
                m, _ = gpr.posterior(x)
            grad = np.array([(m[1] - m[0]) / h * scales[0], (m[2] - m[0]) / h * scales[1]])
            steepest = max(steepest, float(np.linalg.norm(grad)))
    assert 0.5 * steepest < estimate < 2.0 * steepest


def test_categorical_coordinates_are_apart_by_the_kernels_hamming_distance() -> None:
    space = {"x": FloatDistribution(-3.0, 3.0), "c": CategoricalDistribution(["a", "b"])}
    rng = np.random.RandomState(0)
    points = np.column_stack([rng.rand(12), rng.randint(0, 2, 12).astype(float)])
    gpr, search, best = _fitted(points, space)
    running = torch.tensor([[0.6, 0.0]], dtype=torch.float64)
    acqf = PenalisedLogEI(gpr, search, best, running)
    with torch.no_grad():
        same = float(acqf.log_penalty(torch.tensor([0.6, 0.0], dtype=torch.float64)))
        other = float(acqf.log_penalty(torch.tensor([0.6, 1.0], dtype=torch.float64)))
    assert same < other  # the other category is one length scale away, not zero

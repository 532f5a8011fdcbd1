"""What runs inside a pod or a local worker: one index -> one finished trial.

Imports optuna and sqlalchemy (through ``sweeper.study``); never kubernetes or click.
User code gets a :class:`TrialContext`; raise :class:`TrialPruned` to stop a pruned trial.
"""

from __future__ import annotations

from optuna import TrialPruned

from trial_runner.context import TrialContext

__all__ = ["TrialContext", "TrialPruned"]

"""sweeper: hyperparameter sweeps from a YAML search space to an Optuna study.

Importing the package is cheap on purpose: trial runners import ``sweeper.study``
on their hot path, so nothing here pulls in click, kubernetes or torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

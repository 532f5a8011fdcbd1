"""``python -m trial_runner``: read JOB_ID, run that index (see trial_runner.main)."""

from __future__ import annotations

import gc
import sys

from trial_runner.main import main

if __name__ == "__main__":
    code = main()
    # Exit without the final collection over every imported module (optuna, SQLAlchemy,
    # numpy): 70-150 ms per runner, paid by every worker the local backend stops at the end
    # of a sweep. main() closed the database connections; atexit handlers still run.
    gc.freeze()
    sys.exit(code)

"""``python -m trial_runner``: read JOB_ID, run that index (see trial_runner.main)."""

from __future__ import annotations

import sys

from trial_runner.main import main

if __name__ == "__main__":
    sys.exit(main())

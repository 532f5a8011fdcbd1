"""A module that fails while being imported, as a training script with a bug at top level."""

raise RuntimeError("boom: this module fails at import time")

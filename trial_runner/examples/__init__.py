"""Built-in objectives that need no downloads (data ships with scikit-learn)."""

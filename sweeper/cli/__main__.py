"""``python -m sweeper.cli``: the same as the ``sweeper`` console script."""

from sweeper.cli import main

if __name__ == "__main__":
    main()

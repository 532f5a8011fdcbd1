"""A module whose attribute is not callable: the target of a bad-spec entrypoint."""

LEARNING_RATE = 0.01

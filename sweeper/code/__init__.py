"""The trial's code as a content-addressed snapshot (``trial.code``):

- :mod:`.snapshot`: a directory -> a deterministic tar.gz and its sha256, and the safe unpack;
- :mod:`.stores`: where snapshots live (the artifact store, or the study storage);
- :mod:`.launch`: what ``run``, ``resume`` and ``render`` do with the snapshot of a launch.

The runner's side (fetch, check, unpack, run there) is ``trial_runner.code``.
"""

"""The Ray runtime's pieces: the data-parallel learner (learner.py) and the rollout side.

Importing this package loads neither Ray nor torch: `shard` (the data-parallel context the
trainers read) is imported by `trainers/`, which must stay light."""

"""The testbed's world, judge, drift schedule and run directory inside other trainers' loops:
`session.DriftSession` (the clock and the rows), `trl` (a reward function for TRL's GRPOTrainer,
the `trl` extra; imported only when asked for) and `remote_reward` (the OpenRLHF `--remote_rm_url`
form, served by judges/server.py). docs/integrations.md."""

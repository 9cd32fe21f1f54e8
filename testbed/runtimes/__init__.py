"""How an arm x seed runs: the synchronous loop (loop.py) and the pieces every runtime shares
(collecting episodes, learning from them, starting policies, checkpoints, the reference), with
each other runtime in its own sub-package (ray/). arms.py picks the runtime of an arm."""

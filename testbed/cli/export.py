"""testbed export DIRECTORY [--scenario FILE] [--seed N]: the SFT policy a run of the scenario starts
from, written as a Hub-format checkpoint (testbed/models/export.py) that `policy.checkpoint`,
transformers and vLLM load."""

from __future__ import annotations

import argparse
import sys

from testbed.models.export import export_policy
from testbed.runtimes.starting import scenario_policy
from testbed.scenario.schema import ScenarioError, load_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed export", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="where to write the Hub-format checkpoint (replaced if it exists)")
    parser.add_argument(
        "--scenario", default="scenarios/style_shift.yaml", help="whose SFT policy (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the run seed whose policy (with policy.sft.per_seed)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario, args.overrides)
    except (ScenarioError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if scenario.policy.checkpoint:
        print(
            f"error: {args.scenario} starts from policy.checkpoint {scenario.policy.checkpoint}, not from an SFT "
            "policy of its own; nothing to export",
            file=sys.stderr,
        )
        return 2
    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    model, tok, report = scenario_policy(scenario, args.seed, log)
    out = export_policy(model, tok, args.directory, {"scenario": str(args.scenario), "seed": args.seed, "sft": report})
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

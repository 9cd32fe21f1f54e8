"""The pure arithmetic of a run's plan (testbed/cli/plan.py): judged episodes per round, held-out
evaluations, gold episodes, judge calls by kind, active parameters, SFT's acceptance samples, and the
arguments safe to print (`public_args`: no secret's value ever)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from testbed.world.rules import unit_hash

__all__ = [
    "ArmShape",
    "active_parameters",
    "episodes_per_round",
    "evaluations",
    "gold_episodes",
    "judge_calls",
    "public_args",
    "sft_acceptance_samples",
    "unset_env_vars",
]

SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}


def episodes_per_round(episodes_per_update: int, group_size: int) -> int:
    """Judged episodes one round of the loop issues: the prompts of one update, each group_size times."""
    return max(1, episodes_per_update // group_size) * group_size


def evaluations(budget: int, per_round: int, every: int) -> int:
    """Held-out evaluations of one arm x seed, as the loop makes them: before a round whenever the
    clock has reached the next due point (0, every, 2 x every, ...), and one more at the end."""
    clock, due, count = 0, 0, 0
    while clock < budget:
        if clock >= due:
            count, due = count + 1, due + every
        clock += min(per_round, budget - clock)
    return count + 1


def gold_episodes(budget: int, share: float) -> int:
    """Episodes of one arm x seed the gold judge scores: those whose clock's hash falls under the share."""
    return budget if share >= 1 else sum(unit_hash("gold", t) < share for t in range(budget))


@dataclass(frozen=True)
class ArmShape:
    """What one arm's judge calls depend on."""

    name: str
    per_round: int  # judged episodes per round (episodes_per_round)
    max_turns: int = 1  # drafts per episode at most (multi-turn: the editor reads each earlier one)
    warmup_runs: int = 0  # warm-ups this arm computes (not cached, not computed by an earlier arm)
    warmup_samples: int = 0


def judge_calls(
    budget: int, seeds: int, arms: list[ArmShape], eval_every: int, eval_prompts: int, gold_share: float | None
) -> dict[str, Any]:
    """Judge calls by kind ({min, max}: a multi-turn episode costs 1 to max_turns calls), per arm
    and in total, assuming no call fails (a failed call does not move the clock, so it costs one more)."""
    gold = gold_episodes(budget, gold_share) if gold_share is not None else 0
    by_arm: dict[str, dict[str, dict[str, int]]] = {}
    for arm in arms:
        evals = evaluations(budget, arm.per_round, eval_every) * eval_prompts * seeds
        low = {
            "training": budget * seeds,
            "eval": evals,
            "warmup": arm.warmup_runs * arm.warmup_samples,
            "gold": gold * seeds,
        }
        turns = {
            "training": arm.max_turns,
            "eval": arm.max_turns,
            "warmup": arm.max_turns,
            "gold": 1,
        }  # gold: last draft
        by_arm[arm.name] = {k: {"min": v, "max": v * turns[k]} for k, v in low.items()}
    kinds = ("training", "eval", "warmup", "gold")
    total = {k: {b: sum(a[k][b] for a in by_arm.values()) for b in ("min", "max")} for k in kinds}
    total["total"] = {b: sum(total[k][b] for k in kinds) for b in ("min", "max")}
    return {**total, "by_arm": by_arm}


def active_parameters(sizes: dict[str, int], num_experts: int | None, top_k: int | None) -> int:
    """Parameters a token passes through: all but the routed experts it is not sent to (top_k of
    num_experts per MoE layer; a shared expert is always active, so only `.experts.` count)."""
    total = sum(sizes.values())
    if not num_experts or not top_k:
        return total
    routed = sum(n for name, n in sizes.items() if ".experts." in f".{name}")
    return total - routed + routed * top_k // num_experts


def sft_acceptance_samples(steps: int, eval_samples: int, candidate_sets: int, max_rounds: int, checks: int) -> int:
    """Embedded-rubric verdicts SFT's acceptance check takes at most: per round the early checks
    in the second half of its steps (testbed.models.sft.train_sft) and one at its end."""
    per_check = max(1, eval_samples // candidate_sets) * candidate_sets
    early = {steps // 2 + i * steps // (2 * checks) for i in range(checks)} if checks > 0 else set()
    return max_rounds * (sum(1 <= c <= steps for c in early) + 1) * per_check


def public_args(value: Any, key: str = "") -> Any:
    """Arguments safe to print: a `*_env` key shows the variable's name and whether it is set (never
    its value), a key that names a secret (api_key, token, ...) is hidden, and a URL loses its password."""
    if isinstance(value, dict):
        return {k: public_args(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [public_args(v, key) for v in value]
    if key.endswith("_env") and isinstance(value, str):
        return {"env_var": value, "set": bool(os.environ.get(value))}
    if SECRET_WORDS & set(key.lower().split("_")):
        return "<hidden>"
    if isinstance(value, str):
        return re.sub(r"(://[^/@:\s]+):[^/@\s]*@", r"\1:<hidden>@", value)
    return value


def unset_env_vars(args: Any, where: str) -> list[str]:
    """The `*_env` arguments (from public_args) whose variable is not set: a real run stops on them."""
    if not isinstance(args, dict):
        return []
    out = []
    for k, v in args.items():
        if isinstance(v, dict) and set(v) == {"env_var", "set"}:
            if not v["set"]:
                out.append(
                    f"{where}.{k}: the environment variable {v['env_var']} is not set; a real run stops at start-up"
                )
        else:
            out += unset_env_vars(v, f"{where}.{k}")
    return out

"""The SFT acceptance bar (`policy.sft.min_quality`, `min_style_share`): whether a check passes it
(`sft_passes`), where it falls short (`shortfall`), and the warning when RL starts below it
(`bar_warning`: what it means for the run and what to change)."""

from __future__ import annotations

from testbed.scenario.schema import PolicyConfig

__all__ = ["bar_warning", "sft_passes", "shortfall"]


def sft_passes(report: dict, cfg: PolicyConfig, archetypes: list[str]) -> bool:
    shares = report["style_shares"]
    return report["quality"] >= cfg.sft.min_quality and all(
        shares.get(s, 0.0) >= cfg.sft.min_style_share for s in archetypes
    )


def shortfall(report: dict, cfg: PolicyConfig, archetypes: list[str]) -> str:
    """Where an SFT check misses the acceptance bar, e.g. 'quality 0.34 (bar 0.80), classical
    written 0.05 (bar 0.10)'."""
    shares = report["style_shares"]
    missed = [f"quality {report['quality']:.2f} (bar {cfg.sft.min_quality:.2f})"] * (
        report["quality"] < cfg.sft.min_quality
    )
    missed += [
        f"{s} written {shares.get(s, 0.0):.2f} (bar {cfg.sft.min_style_share:.2f})"
        for s in archetypes
        if shares.get(s, 0.0) < cfg.sft.min_style_share
    ]
    return "below the acceptance bar: " + ", ".join(missed)


def bar_warning(report: dict, cfg: PolicyConfig, archetypes: list[str]) -> str:
    """The warning for an SFT policy that RL starts from below the bar: what it means, what to change."""
    low_quality = report["quality"] < cfg.sft.min_quality
    means = (
        "many of its pieces fail the judge's quality check whatever their style, so rewards stay low and "
        "realignment may not show"
        if low_quality
        else "a style it seldom writes is one RL can hardly find when it becomes the target"
    )
    return (
        f"warning: after {cfg.sft.max_rounds} round(s) of {cfg.sft.steps} steps the SFT policy is "
        f"{shortfall(report, cfg, archetypes)}. RL starts from it anyway: {means}. To reach the bar, raise "
        "policy.sft.steps or policy.sft.max_rounds in the scenario (or the policy's size)."
    )

"""The claims card (analysis/claims.py): each claim's verdict from a paired comparison of
hand-built per-seed tables."""

from types import SimpleNamespace

import pandas as pd
import pytest

from analysis import claims


def analysis_of(
    values: dict[str, list[float]], metric: str = "episodes_to_bar", name: str = "style_shift"
) -> SimpleNamespace:
    """A stand-in for report.Analysis: per arm, one value per seed for switches 1 and 2."""
    rows = [
        {"arm": arm, "seed": s, "switch": k, metric: v + 10 * k}
        for arm, vs in values.items()
        for s, v in enumerate(vs)
        for k in (1, 2)
    ]
    run = SimpleNamespace(
        name=name, manifest={"git_commit": "abcdef0123", "numerics": {"mode": "portable"}, "scenario": name}
    )
    return SimpleNamespace(arm_order=list(values), per_seed=pd.DataFrame(rows), segments=pd.DataFrame(), runs=[run])


def verdicts(a) -> dict[str, str]:
    return {r["claim"].text: r["verdict"] for r in claims.card_rows([a])}


HEADLINE = claims.CLAIMS[0].text  # SAO realigns faster than the running mean


def test_a_clear_paired_difference_supports_or_contradicts():
    faster = analysis_of({"sao": [100, 300, 500, 700, 900], "running_mean": [150, 340, 560, 760, 940]})
    assert verdicts(faster)[HEADLINE] == "supported"  # 40-60 fewer episodes in every seed
    slower = analysis_of({"sao": [150, 340, 560, 760, 940], "running_mean": [100, 300, 500, 700, 900]})
    assert verdicts(slower)[HEADLINE] == "contradicted"


def test_a_noisy_difference_is_not_resolved_and_says_what_would_resolve_it():
    a = analysis_of({"sao": [100, 900, 300, 700, 500], "running_mean": [600, 200, 800, 400, 450]})
    row = next(r for r in claims.card_rows([a]) if r["claim"].text == HEADLINE)
    assert row["verdict"] == "not resolved at this power"
    assert "resolvable" in row["estimate"] and "paired over 5 seeds" in row["estimate"]
    assert row["command"] == "python -m testbed.run scenarios/style_shift.yaml" and "abcdef0" in row["run"]


def test_claims_whose_arms_no_run_holds_are_not_run_with_the_command():
    a = analysis_of({"sao": [1, 2, 3], "running_mean": [2, 3, 4]})
    rows = {r["claim"].text: r for r in claims.card_rows([a])}
    table4 = next(r for t, r in rows.items() if "K = 1" in t)
    assert table4["verdict"] == "not run" and table4["command"] == "python -m testbed.run scenarios/ablations.yaml"
    text = claims.card_markdown(claims.card_rows([a]))
    assert text.count("\n| ") == len(claims.CLAIMS) + 1  # the header and one row per claim


def test_a_claim_is_judged_on_its_own_scenario_only():
    faster = {"sao": [100, 300, 500, 700, 900], "running_mean": [150, 340, 560, 760, 940]}
    slower = {"sao": [150, 340, 560, 760, 940], "running_mean": [100, 300, 500, 700, 900]}
    rows = claims.card_rows([analysis_of(faster, name="ablations"), analysis_of(slower, name="style_shift")])
    headline = next(r for r in rows if r["claim"].text == HEADLINE)
    assert headline["verdict"] == "contradicted"  # the style_shift run, though listed second
    assert headline["command"].endswith("scenarios/style_shift.yaml") and headline["run"].startswith("style_shift")
    only = claims.card_rows([analysis_of(faster, name="ablations")])
    not_its_own = next(r for r in only if r["claim"].text == HEADLINE)
    assert not_its_own["verdict"] == "not run"  # an ablations run does not stand in for the headline's


def test_verdicts_are_holm_adjusted_across_the_claims_with_values():
    """Two claims with values: the smaller p is doubled, so a p just under 0.05 alone no longer
    supports once a second claim, not resolved, is tested beside it."""
    from analysis.stats.tests import holm

    # SAO faster than the running mean by 40 +- a little in every seed: p ~ 0.03 alone
    sao = [100, 300, 500, 700, 900]
    rm = [s + d for s, d in zip(sao, [15, 70, 40, 10, 70])]
    alone = analysis_of({"sao": sao, "running_mean": rm})
    row = next(r for r in claims.card_rows([alone]) if r["claim"].text == HEADLINE)
    p = float(row["estimate"].split("; p = ")[1].split(" ")[0])
    assert 0.025 < p < 0.05 and row["verdict"] == "supported"
    grpo = [s + d for s, d in zip(sao, [300, -200, 100, -250, 50])]  # no difference to speak of
    rows = {r["claim"].id: r for r in claims.card_rows([analysis_of({"sao": sao, "running_mean": rm, "grpo": grpo})])}
    assert holm([p, 0.9])[0] == pytest.approx(2 * p)
    assert rows["sao_vs_running_mean"]["verdict"] == "not resolved at this power"  # 2p > 0.05
    assert "(Holm 0.0669)" in rows["sao_vs_running_mean"]["estimate"]


def test_a_difference_inside_the_margin_is_equivalent_with_power():
    sao = [1000, 1200, 1400, 1600, 1800]
    rm = [s + d for s, d in zip(sao, [2, -3, 1, -1, 2])]  # tiny differences against a 10% margin of ~140
    row = next(
        r for r in claims.card_rows([analysis_of({"sao": sao, "running_mean": rm})]) if r["claim"].text == HEADLINE
    )
    assert row["verdict"] == "equivalent" and "TOST p" in row["estimate"]


def test_a_claim_whose_arms_cannot_differ_says_why_and_gives_no_seed_count():
    rows = {r["claim"].id: r for r in claims.card_rows([analysis_of({"sao": [1, 2], "vanilla_vapo": [1, 2]})])}
    vapo = rows["dis_over_ppo_clip"]
    assert vapo["verdict"] == "not testable" and "importance ratio is 1" in vapo["estimate"]
    assert "seeds" not in vapo["estimate"]


def test_a_ratio_dependent_claim_on_a_run_whose_ratio_never_moved_is_not_testable_there():
    """The corrections' claims compare arms that differ only where the importance ratio moves: on a
    run whose every update has approx_kl ~ 0 (the synchronous runtime, an exact engine) the card says
    so instead of a verdict or a seed count; where the ratio moved it gives the verdict."""
    values = {"sao": [100, 300, 500, 700, 900], "vanilla_vapo": [150, 340, 560, 760, 940], "sao_r3": [1, 2, 3, 4, 5]}

    def card(kl: float) -> dict[str, dict]:
        a = analysis_of(values, metric="episodes_to_bar", name="cluster_corrections")
        a.runs[0].updates = pd.DataFrame(
            [{"arm": arm, "update": u, "approx_kl": kl * (u + 1)} for arm in values for u in range(3)]
        )
        return {r["claim"].id: r for r in claims.card_rows([a])}

    flat = card(1e-13)["replay_stale_routing"]
    assert flat["verdict"] == "not testable in this runtime" and "importance ratio stayed at 1" in flat["estimate"]
    assert "seeds" not in flat["estimate"] and "sao_r3" in flat["estimate"]
    moved = card(1e-4)["replay_stale_routing"]
    assert moved["verdict"] == "contradicted"  # sao_r3's made-up values are far smaller: the card reads them
    # a run with no updates table says nothing about its ratio: the card does not guess
    no_updates = {r["claim"].id: r for r in claims.card_rows([analysis_of(values, name="cluster_corrections")])}
    assert no_updates["replay_stale_routing"]["verdict"] == "contradicted"


def test_published_csvs_name_their_scenario_commit_and_command_from_run_json(tmp_path):
    """docs/results/<run>/ holds a report's per-seed CSVs; its run.json says which scenario, commit,
    numerics and command made them, so the card's row and reproduce command are that run's."""
    import json

    from analysis.power import PerSeedFiles

    published = tmp_path / "revision-abc1234"
    published.mkdir()
    pd.DataFrame([{"arm": "sao", "seed": 0, "switch": 1, "episodes_to_bar": 10.0}]).to_csv(
        published / "switches_by_seed.csv", index=False
    )
    assert PerSeedFiles(published).manifest == {"scenario": "revision"}  # without run.json: the folder's name
    described = {"scenario": "revision_shift", "git_commit": "abc1234", "numerics": {"mode": "native"}}
    command = "git checkout abc1234 && python -m testbed.run scenarios/revision_shift.yaml --set numerics=native"
    (published / "run.json").write_text(json.dumps({**described, "command": command}))
    files = PerSeedFiles(published)
    assert files.manifest["scenario"] == "revision_shift"
    where, reproduce = claims._where(SimpleNamespace(runs=[files]))
    assert where.startswith("revision-abc1234 (commit abc1234, numerics native)")
    assert reproduce == command  # as written, not a second --set numerics
    (published / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match="run.json"):
        PerSeedFiles(published)

"""Agreement figures of a judge against hand labels: percent agreement and Cohen's kappa.

Percent agreement alone flatters a judge on a skewed set (one that passes everything agrees with
most labels when most pieces are good); kappa discounts the agreement chance alone would give,
from each side's marginals: kappa = (p_o - p_e) / (1 - p_e).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from testbed.types import Verdict
from testbed.world import STYLES


def cohen_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa of two label sequences; nan when chance alone explains everything (p_e = 1)."""
    n = len(a)
    if n == 0 or n != len(b):
        raise ValueError(f"need two label sequences of one non-zero length, got {len(a)} and {len(b)}")
    p_o = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[k] * cb[k] for k in ca) / (n * n)
    return float("nan") if p_e == 1.0 else (p_o - p_e) / (1.0 - p_e)


def figures(rows: list[dict], verdicts: list[Verdict]) -> dict:
    """Style agreement on good pieces (per true style, overall, with kappa: one style against the
    rest, and over all styles), good pieces passing quality, bad ones failing it (per kind), and
    quality's kappa against the good/bad labels over every piece."""
    pairs = list(zip(rows, verdicts))
    good = [(r, v) for r, v in pairs if r["good"]]
    true_s, judged_s = [r["style"] for r, _ in good], [v.style for _, v in good]
    style = {s: [v.style == s for r, v in good if r["style"] == s] for s in STYLES}
    style_kappa = {s: cohen_kappa([t == s for t in true_s], [j == s for j in judged_s]) for s in style if style[s]}
    kinds = sorted({r["kind"] for r in rows if not r["good"]})
    bad = {k: [v.quality == 0 for r, v in pairs if r["kind"] == k] for k in kinds}
    passes = [v.quality == 1 for _, v in good]
    return {
        "n": len(rows),
        "style": {s: (sum(x), len(x)) for s, x in style.items() if x},
        "style_kappa": style_kappa,
        "style_all": (sum(t == j for t, j in zip(true_s, judged_s)), len(good)),
        "style_all_kappa": cohen_kappa(true_s, judged_s) if good else float("nan"),
        "good_pass": (sum(passes), len(passes)),
        "bad_fail": {k: (sum(x), len(x)) for k, x in bad.items()},
        "bad_fail_all": (sum(sum(x) for x in bad.values()), sum(len(x) for x in bad.values())),
        "quality_all": (sum(v.quality == int(r["good"]) for r, v in pairs), len(pairs)),
        "quality_kappa": cohen_kappa([int(r["good"]) for r in rows], [v.quality for v in verdicts]),
    }


def _pct(pair: tuple[int, int]) -> str:
    k, n = pair
    return f"{k / n:6.1%} ({k}/{n})" if n else "     -"


def print_figures(name: str, fig: dict) -> None:
    print(f"{name}: {fig['n']} pieces")
    print("  style agreement on good pieces, per true style (kappa: that style against the rest):")
    for s, pair in fig["style"].items():
        print(f"    {s:<11} {_pct(pair):<16} kappa {fig['style_kappa'][s]:.3f}")
    print(f"  style, overall     {_pct(fig['style_all']):<16} kappa {fig['style_all_kappa']:.3f}")
    print(f"  good pass quality  {_pct(fig['good_pass'])}")
    for kind, pair in fig["bad_fail"].items():
        print(f"  bad fail: {kind:<16} {_pct(pair)}")
    print(f"  bad fail, overall  {_pct(fig['bad_fail_all'])}")
    print(f"  quality, overall   {_pct(fig['quality_all']):<16} kappa {fig['quality_kappa']:.3f}")


# A pass/fail tally of one set or a pool of sets (the training scripts' leave-one-set-out tables):
# (good pieces passing, good pieces, bad pieces failing per kind, bad pieces per kind)
Tally = tuple[int, int, Counter[str], Counter[str]]


def tally_line(f: Tally) -> str:
    passed, n_good, failed, kinds = f
    nb, nf = sum(kinds.values()), sum(failed.values())
    per = " ".join(f"{k} {failed[k]}/{kinds[k]}" for k in sorted(kinds))
    return f"good pass {passed}/{n_good} ({passed / max(n_good, 1):.1%})  bad fail {nf}/{nb} ({nf / max(nb, 1):.1%})  [{per}]"


def add_tallies(a: Tally, b: Tally) -> Tally:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]

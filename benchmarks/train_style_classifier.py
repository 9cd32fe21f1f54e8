"""Train the open-world judge's style classifier (judges/open_world/classifier.py) on the project's own
hand-written pieces, choose how the judge combines it with the markers by leave-one-set-out
cross-validation, and write the weights.

    python benchmarks/train_style_classifier.py [--cv] [--write [--out PATH]] [--generator 0] [--l2 1e-3]

Training data: the good pieces of every hand-written set scored so far (open_world_corpus.jsonl and
the voices corpus's nine splits dev, heldout, heldout2 ... heldout8: VOICES), label = their style.
Never a later set (`heldout9` on): those test the change. `--generator N` adds N generated pieces
per style (benchmarks/judge_agreement.py's corpus).

--cv: each of the nine voices sets in turn is held out, the model trained on the other eight and
the original corpus; prints, per held-out set, pooled, and pooled per true style, style agreement
and Cohen's kappa of the markers alone (the judge's `judged_style`) and of two ways to combine the
two signals (judges/open_world/judge.py): a weighted sum, argmax over styles of log p(style) + bonus x
[style is the markers' decision] (bonus 0: the classifier alone), and a gate, the markers when they
name a marked style with at least gate x the plain threshold of mass, else the classifier.
--write: trains on the original corpus and all nine voices sets and writes
judges/data/open_style_model.npz (byte-identical from run to run).

The model: multinomial logistic regression, L2-penalised, full-batch Adam in numpy (no sklearn).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agreement_stats import cohen_kappa  # noqa: E402
from softmax_regression import fit_softmax  # noqa: E402  (benchmarks/softmax_regression.py)

from judges.open_world.classifier import CLASSES, DENSE, MODEL_PATH, StyleModel, dense_features, sparse_features  # noqa: E402
from judges.open_world.judge import combined_style, gated_style, read  # noqa: E402

DATA = ROOT / "judges" / "data"
VOICES = ("dev", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")
SETS: dict[str, Path] = {
    "original": DATA / "open_world_corpus.jsonl",
    **{s: DATA / f"open_world_voices_{s}.jsonl" for s in VOICES},
}
BONUSES = (0.0, 0.5, 1.0, 2.0)
GATES = (1.0, 1.5, 2.0, 3.0)


def piece(text: str) -> tuple[set[str], list[float], str, float]:
    """(sparse features, dense features, the markers' decision, their mass over the plain
    threshold) of a piece, read as the judge reads it (judges/open_world/judge.py's `read`)."""
    r = read(text)
    dense = dense_features(r.toks, r.words, r.scores, r.plain_mass)
    return sparse_features(r.toks, r.words), dense, r.marker_style, sum(r.scores) / r.plain_mass


def load(generator: int = 0) -> dict[str, list[tuple[str, set[str], list[float], str, float]]]:
    out: dict[str, list[tuple[str, set[str], list[float], str, float]]] = {}
    for name, path in SETS.items():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[name] = [(r["style"], *piece(r["text"])) for r in rows if r["good"]]
    if generator:
        from judge_agreement import make_corpus

        out["generator"] = [(s, *piece(r.response)) for s, r in make_corpus(generator, 1234)]  # type: ignore[arg-type]
    return out


def train(
    data: list[tuple[str, set[str], list[float], str, float]], l2: float, min_df: int = 2, steps: int = 300
) -> StyleModel:
    df = Counter(f for _, sp, _, _, _ in data for f in sp)
    vocab = sorted(f for f, c in df.items() if c >= min_df)
    index = {f: i for i, f in enumerate(vocab)}
    n, ns, nd = len(data), len(vocab), len(DENSE)
    # float64: the same weights on every processor (benchmarks/softmax_regression.py)
    x = np.zeros((n, ns + nd + 1), dtype=np.float64)
    y = np.zeros((n, len(CLASSES)), dtype=np.float64)
    for i, (label, sp, dense, _, _) in enumerate(data):
        rows = [index[f] for f in sp if f in index]
        if rows:
            x[i, rows] = 1.0 / np.sqrt(len(rows))
        x[i, ns : ns + nd] = dense
        x[i, -1] = 1.0
        y[i, CLASSES.index(label)] = 1.0
    w = fit_softmax(x, y, l2, steps)
    return StyleModel(vocab, w)


def cv(data: dict, l2: float, generator: bool, steps: int = 300) -> None:
    """Leave-one-set-out over the voices sets (VOICES): each held out in turn, the model trained on
    the other eight and the original corpus; per held-out set, pooled, and pooled per true style."""
    pooled: dict[str, list[tuple[str, str]]] = {}
    print(f"leave-one-set-out, l2 {l2}, {steps} steps, generator pieces in training: {generator}")
    names = ["markers", *(f"bonus {b:g}" for b in BONUSES), *(f"gate {g:g}" for g in GATES)]
    print(f"  {'held out':<10} {'n':>4}  " + "  ".join(f"{k:<15}" for k in names))
    for out in VOICES:
        train_rows = [r for s in data if s != out and (generator or s != "generator") for r in data[s]]
        model = train(train_rows, l2, steps=steps)
        test = data[out]
        probs = [model.probs({model.index[f] for f in sp if f in model.index}, dn) for _, sp, dn, _, _ in test]
        truth = [row[0] for row in test]
        preds = {"markers": [row[3] for row in test]}
        for b in BONUSES:
            preds[f"bonus {b:g}"] = [combined_style(p, row[3], b) for p, row in zip(probs, test)]
        for g in GATES:
            preds[f"gate {g:g}"] = [gated_style(p, row[3], row[4], g) for p, row in zip(probs, test)]
        line = []
        for k, pr in preds.items():
            pooled.setdefault(k, []).extend(zip(truth, pr))
            acc = sum(a == b for a, b in zip(truth, pr)) / len(truth)
            line.append(f"{acc:6.1%} ({cohen_kappa(truth, pr):.3f})")
        print(f"  {out:<10} {len(test):>4}  " + "  ".join(line))
    line = []
    for pairs in pooled.values():
        t, p = zip(*pairs)
        line.append(f"{sum(a == b for a, b in pairs) / len(pairs):6.1%} ({cohen_kappa(t, p):.3f})")
    print(f"  {'pooled':<10} {len(pooled['markers']):>4}  " + "  ".join(line))
    for style in CLASSES:  # pooled per true style: agreement, kappa of that style against the rest
        line = []
        for pairs in pooled.values():
            mine = [b for a, b in pairs if a == style]
            t, p = zip(*((a == style, b == style) for a, b in pairs))
            line.append(f"{sum(b == style for b in mine) / len(mine):6.1%} ({cohen_kappa(t, p):.3f})")
        print(f"  {style:<10} {sum(a == style for a, _ in pooled['markers']):>4}  " + "  ".join(line))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cv", action="store_true")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--generator", type=int, default=0, help="generated pieces per style added to training")
    ap.add_argument("--l2", type=float, nargs="+", default=[0.0])
    ap.add_argument("--steps", type=int, nargs="+", default=[300], help="Adam steps (early stopping)")
    ap.add_argument("--out", type=Path, default=MODEL_PATH, help="where --write writes the weights")
    a = ap.parse_args()
    data = load(a.generator)
    if a.cv:
        for l2 in a.l2:
            for steps in a.steps:
                cv(data, l2, bool(a.generator), steps)
    if a.write:
        model = train([r for rows in data.values() for r in rows], a.l2[0], steps=a.steps[0])
        model.save(a.out)
        print(f"wrote {a.out} ({a.out.stat().st_size:,} bytes, {model.n_sparse:,} sparse features)")


if __name__ == "__main__":
    main()

"""The one learner behind the judge's two trained models (benchmarks/train_style_classifier.py,
benchmarks/train_topic_model.py): multinomial logistic regression, L2-penalised except on the bias
(the last feature column), fitted from zero by full-batch Adam in numpy.

float64 throughout: the BLAS kernels differ by processor (OpenBLAS picks Haswell, SkylakeX or Zen
code), and in float32 their last-bit differences grow over the steps into other weights on another
machine (the style classifier's float16 file, the topic model's 3e-3 tolerance); in float64 they do
not, so a script writes the shipped file on any x86-64 processor.
"""

from __future__ import annotations

import numpy as np

LR, BETA1, BETA2, EPS = 0.1, 0.9, 0.999, 1e-8


def fit_softmax(x: np.ndarray, y: np.ndarray, l2: float, steps: int) -> np.ndarray:
    """Weights [features, classes] for features `x` [n, features] (bias column last) and one-hot
    labels `y` [n, classes]: `steps` Adam steps on the mean cross-entropy plus l2 x |w|^2 / 2."""
    x, y = x.astype(np.float64, copy=False), y.astype(np.float64, copy=False)
    w = np.zeros((x.shape[1], y.shape[1]), dtype=np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    reg = np.ones((x.shape[1], 1), dtype=np.float64)
    reg[-1] = 0.0  # no penalty on the bias
    for t in range(1, steps + 1):
        z = x @ w
        z -= z.max(axis=1, keepdims=True)  # a stable softmax
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = x.T @ (p - y) / len(x) + l2 * reg * w
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        w -= LR * (m / (1 - BETA1**t)) / (np.sqrt(v / (1 - BETA2**t)) + EPS)
    return w

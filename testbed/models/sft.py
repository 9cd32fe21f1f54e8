"""Supervised fine-tuning on a mixed-style corpus, so RL starts from a policy that can write every
style, and a cache keyed by config hash so later runs skip it.

Each example is `<bos> prompt <sep> piece <eos>`: the prompt names a topic and lists candidate
styles, and the piece is written in one of the candidates chosen uniformly. The SFT policy
therefore picks among the listed styles; which one the hidden reward wants is what RL learns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from filelock import FileLock
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import AutoModelForCausalLM

from testbed.cpu_numerics import numerics_tag
from testbed.models.policy import build_policy, count_parameters, hidden_states
from testbed.models.sft_bar import bar_warning, sft_passes, shortfall
from testbed.models.tokenizer import WordTokenizer
from testbed.paths import cache_dir, source_fingerprint
from testbed.scenario.schema import PolicyConfig
from testbed.world import generate, prompts, render_prompt, vocabulary

CACHE_FORMAT = 2  # bump when the corpus or training recipe changes meaning (2: stops early at the bar)
EARLY_CHECKS = 4  # acceptance checks in the second half of each SFT round (each samples eval_samples)


def cache_root() -> Path:
    return cache_dir()


def policy_key(cfg: PolicyConfig, archetypes: list[str], env: Any = None) -> str:
    """The cache key: everything that determines the SFT policy. `env` (an EnvConfig) counts only
    for an env that brings its own corpus (multi-turn), so the single-turn keys never move."""
    spec = {
        "format": CACHE_FORMAT,
        # per_seed only picks sft.seed per run seed (testbed/cli/run_command.py) and LoRA trains after SFT:
        # the policy is the same
        "policy": cfg.model_dump(mode="json", exclude={"checkpoint": True, "lora": True, "sft": {"per_seed"}}),
        "archetypes": archetypes,
        "vocabulary": hashlib.sha256("\n".join(vocabulary()).encode()).hexdigest(),
        "torch": torch.__version__.split("+")[0],
        # the CPU kernels: portable policies are the same bits everywhere, native ones are the processor's
        "numerics": numerics_tag(),
        # the code that builds, trains and accepts the policy: new code retrains, even for rounding
        "code": source_fingerprint("testbed/models", "testbed/world", "judges"),
    }
    env_cls = env.load() if env is not None else None
    if getattr(env_cls, "sft_examples", None) is not None:  # "name": the key the caches were written under
        spec["env"] = {"name": env.type, "corpus": env_cls.sft_key(env.settings())}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def is_cached(cfg: PolicyConfig, archetypes: list[str], env: Any = None) -> bool:
    """Whether the SFT policy of this config is in the cache (a checkpoint is never trained)."""
    return (
        bool(cfg.checkpoint)
        or (cache_root() / f"policy-{policy_key(cfg, archetypes, env)}" / "sft_report.json").exists()
    )


def sft_corpus(size: int, archetypes: list[str], seed: int) -> list[tuple[str, str, str]]:
    """(prompt, piece, style) triples over the training prompts, candidates drawn per example."""
    rng = random.Random(seed)
    specs = prompts("train")
    corpus = []
    for _ in range(size):
        spec = rng.choice(specs)
        k = rng.randint(min(2, len(archetypes)), len(archetypes))
        candidates = rng.sample(archetypes, k)
        style = rng.choice(candidates)
        corpus.append((render_prompt(spec, candidates), generate(style, spec.topic, rng), style))
    return corpus


Example = tuple[str, list[tuple[str, str, bool]]]  # prompt, [(kind "action" | "observation", text, trained on)]


def encode_examples(examples: list[Example], tok: WordTokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-segment examples (an env's own corpus): right-padded ids, attention mask and labels.
    An action is its text and <eos>, an observation its text and <sep> (as the engine lays them
    out); labels only on the actions marked as trained on."""
    rows = []
    for prompt, segments in examples:
        ids, labels = tok.prompt_ids(prompt), None
        labels = [-100] * len(ids)
        for kind, text, train in segments:
            part = tok.encode(text) + [tok.eos_id] if kind == "action" else tok.observation_ids(text)
            ids += part
            labels += part if (kind == "action" and train) else [-100] * len(part)
        rows.append((ids, labels))
    width = max(len(i) for i, _ in rows)
    ids_t = torch.full((len(rows), width), tok.pad_id, dtype=torch.long)
    labels_t = torch.full_like(ids_t, -100)
    mask = torch.zeros_like(ids_t)
    for row, (ids, labels) in enumerate(rows):
        ids_t[row, : len(ids)] = torch.tensor(ids)
        labels_t[row, : len(ids)] = torch.tensor(labels)
        mask[row, : len(ids)] = 1
    return ids_t, mask, labels_t


class CorpusTokenizer(Protocol):
    """What `encode_corpus` needs of a tokenizer: the project's WordTokenizer and a Hub one
    (testbed/models/hub_tokenizer.py) both have it."""

    pad_id: int
    eos_id: int

    def prompt_ids(self, prompt: str) -> list[int]: ...

    def encode(self, text: str) -> list[int]: ...


def encode_corpus(
    corpus: list[tuple[str, str, str]], tok: CorpusTokenizer
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 off the piece and its <eos>)."""
    rows = []
    for prompt, piece, _ in corpus:
        prefix = tok.prompt_ids(prompt)
        rows.append((prefix, tok.encode(piece) + [tok.eos_id]))
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), tok.pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for i, (prefix, response) in enumerate(rows):
        seq = prefix + response
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(prefix) : len(seq)] = torch.tensor(response)
    return ids, mask, labels


def causal_lm_loss(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' causal-LM loss (token mean of the cross-entropy over labelled positions),
    with the output layer run only where a label is: the prompt positions carry none, and for a
    small model with a large vocabulary the output layer is a good part of the cost."""
    hidden = hidden_states(model.get_decoder(), ids, mask)[0]
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.get_output_embeddings()(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), targets[keep])


OnStep = Callable[..., None]  # on_step(step, total, **values): testbed/runtimes/bars.py draws it


def train_sft(
    model: torch.nn.Module,
    data: tuple[torch.Tensor, ...],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    label: str = "SFT",
    accept: Callable[[], bool] | None = None,
    checks: int = 0,
    on_step: OnStep | None = None,
) -> list[float]:
    """AdamW with linear warm-up and cosine decay; returns the loss curve.

    With `accept`, the model is checked `checks` times, evenly over the second half of the run
    (and not at the very end, which the caller checks anyway), and training stops at the first
    check it passes: most runs meet the bar well before the schedule ends.

    After each step, `on_step(step, total, loss=...)`: the mean of the last 20 losses (already on
    the host: no extra sync); `total` is `steps`, or this step when a check passed here. Without
    `on_step`, a bar of its own (`label`) is drawn."""
    ids, mask, labels = data
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps))))
    )
    check_at = (
        {steps // 2 + i * steps // (2 * checks) for i in range(checks)} if accept is not None and checks > 0 else set()
    )
    losses: list[float] = []
    model.train()
    with transient_bar(label) if on_step is None else contextlib.nullcontext(on_step) as report:
        for step in range(steps):
            idx = torch.randint(0, len(ids), (batch_size,), generator=gen)
            width = int(mask[idx].sum(1).max())  # trim padding shared by the whole batch
            loss = causal_lm_loss(model, ids[idx, :width], mask[idx, :width], labels[idx, :width])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            passed = step + 1 in check_at and passes(model, accept)
            report(step + 1, step + 1 if passed else steps, loss=sum(losses[-20:]) / len(losses[-20:]))
            if passed:
                break
    model.eval()
    return losses


def passes(model: torch.nn.Module, accept: Callable[[], bool]) -> bool:
    """The acceptance check, in eval mode (sampling), back to training after."""
    model.eval()
    passed = accept()
    model.train()
    return passed


@contextlib.contextmanager
def transient_bar(label: str) -> Iterator[OnStep]:
    """A bar of its own, for a caller that draws none (a script, a notebook); gone when done."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None, loss="-")
        yield lambda step, total, loss: bar.update(task, completed=step, total=total, loss=f"{loss:.3f}")


Evaluate = Callable[[torch.nn.Module, WordTokenizer], dict]


def tokenizer_and_corpus(cfg: PolicyConfig, archetypes: list[str], env: Any = None) -> tuple[WordTokenizer, Callable]:
    """The tokenizer, and a function encoding the SFT corpus with it: the world's single-turn
    pieces, or the corpus of an env that brings its own (`extra_words`, `sft_examples`)."""
    env_cls = env.load() if env is not None else None
    examples = getattr(env_cls, "sft_examples", None)
    if examples is None:
        return WordTokenizer.build(), lambda tok: encode_corpus(
            sft_corpus(cfg.sft.corpus_size, archetypes, cfg.sft.seed), tok
        )
    tok = WordTokenizer.build(env_cls.extra_words())
    return tok, lambda tok: encode_examples(
        examples(cfg.sft.corpus_size, archetypes, cfg.sft.seed, env.settings()), tok
    )


def load_or_train_policy(
    cfg: PolicyConfig,
    archetypes: list[str],
    evaluate: Evaluate | None = None,
    log: Callable[[str], None] = print,
    env: Any = None,
    on_step: OnStep | None = None,
) -> tuple[torch.nn.Module, WordTokenizer, dict]:
    """The SFT policy for this config: from the cache if it is there, else trained (in rounds of
    `sft.steps` until `evaluate` says every archetype is written well) and cached. An env (its
    EnvConfig) that brings words and a corpus of its own (`extra_words`, `sft_examples`: a
    multi-turn env teaching revision) has them used. `on_step`: each training step (`train_sft`)."""
    if cfg.checkpoint:
        return load_checkpoint(cfg.checkpoint)
    key = policy_key(cfg, archetypes, env)
    directory = cache_root() / f"policy-{key}"
    if (cached := load_cached(directory, log)) is not None:
        return cached
    locks = directory.parent / ".locks"  # beside the cached policies, not among them
    locks.mkdir(parents=True, exist_ok=True)
    # Another process (a test worker, a second run) training the same policy: wait for it, then load.
    with FileLock(locks / f"{directory.name}.lock"):
        if (cached := load_cached(directory, log)) is not None:
            return cached
        return train_policy(cfg, archetypes, evaluate, log, env, key, directory, on_step)


def load_cached(directory: Path, log: Callable[[str], None]) -> tuple[torch.nn.Module, WordTokenizer, dict] | None:
    """The cached SFT policy in `directory`, or None."""
    if not (directory / "sft_report.json").exists():
        return None
    tok = WordTokenizer.load(directory / "tokenizer.json")
    model = AutoModelForCausalLM.from_pretrained(directory)
    model.eval()
    report = json.loads((directory / "sft_report.json").read_text())
    log(f"SFT policy from cache {directory} (quality {report['eval'].get('quality', float('nan')):.2f})")
    return model, tok, report


def sft_report(key: str, model: torch.nn.Module, losses: list[float], seconds: float, report: dict) -> dict:
    """What the cache keeps beside the SFT policy: its key, size, loss curve, time and acceptance check."""
    return {
        "key": key,
        "parameters": count_parameters(model),
        "steps": len(losses),
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
        "loss_curve": loss_curve(losses),
        "seconds": round(seconds, 1),
        "eval": report,
    }


def train_policy(
    cfg: PolicyConfig,
    archetypes: list[str],
    evaluate: Evaluate | None,
    log: Callable[[str], None],
    env: Any,
    key: str,
    directory: Path,
    on_step: OnStep | None = None,
) -> tuple[torch.nn.Module, WordTokenizer, dict]:
    """Train the SFT policy (rounds of `sft.steps` until `evaluate` accepts it) and cache it."""
    tok, corpus = tokenizer_and_corpus(cfg, archetypes, env)
    model = build_policy(cfg, tok, seed=cfg.sft.seed)
    log(
        f"Training the SFT policy ({count_parameters(model):,} parameters, {cfg.num_experts} experts, "
        f"top-{cfg.top_k}); cached as {directory}"
    )
    start = time.time()
    data = corpus(tok)
    losses: list[float] = []
    report: dict = {}
    checked: dict = {}  # the report of a passing early check (training stopped there), not rerun

    def accept() -> bool:
        report = evaluate(model, tok)
        passed = sft_passes(report, cfg, archetypes)
        if passed:
            checked["report"] = report
        return passed

    for round_ in range(cfg.sft.max_rounds):
        checked.clear()
        losses += train_sft(
            model,
            data,
            cfg.sft.steps,
            cfg.sft.batch_size,
            cfg.sft.lr,
            cfg.sft.seed + round_,
            f"SFT round {round_ + 1}",
            accept=accept if evaluate else None,
            checks=EARLY_CHECKS,
            on_step=in_round(on_step, round_),
        )
        report = checked.get("report") or (evaluate(model, tok) if evaluate else {})
        if not evaluate or sft_passes(report, cfg, archetypes):
            break
        log(f"SFT round {round_ + 1} of {cfg.sft.max_rounds}: {shortfall(report, cfg, archetypes)}; training on")
    else:
        log(bar_warning(report, cfg, archetypes))
    full_report = sft_report(key, model, losses, time.time() - start, report)
    full_report["passed"] = bool(report) and sft_passes(report, cfg, archetypes)
    save_policy(directory, model, tok, full_report)
    log(f"SFT done in {full_report['seconds']} s: {report}")
    return model, tok, full_report


def in_round(on_step: OnStep | None, round_: int) -> OnStep | None:
    """`on_step` for a round of SFT: a round after the first says which it is (its steps count from 1 again)."""
    if on_step is None or round_ == 0:
        return on_step
    return lambda step, total, **values: on_step(step, total, round=round_ + 1, **values)


LOSS_CURVE_EVERY = 50  # steps per point of the report's loss curve


def loss_curve(losses: list[float], every: int = LOSS_CURVE_EVERY) -> list[float]:
    """The mean loss of each full block of `every` steps (tests/test_sft_quality.py holds it in a band)."""
    return [round(sum(losses[i : i + every]) / every, 5) for i in range(0, len(losses) - every + 1, every)]


def save_policy(directory: Path, model: torch.nn.Module, tok: WordTokenizer, report: dict) -> None:
    """Into the cache atomically: a temporary directory renamed into place."""
    tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tok.save(tmp / "tokenizer.json")
    (tmp / "sft_report.json").write_text(json.dumps(report, indent=2))
    if directory.exists():  # another process finished first; keep theirs
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, directory)


def load_checkpoint(path: str) -> tuple[torch.nn.Module, Any, dict]:
    """A checkpoint directory: a Hub-format causal LM with its own tokenizer, or this project's own
    (testbed/models/hub.py)."""
    from testbed.models.hub import load_checkpoint as load

    return load(path)

"""A scenario's drifting reward inside TRL's `GRPOTrainer` (the `trl` extra: pip install 'testbed[trl]').

    from testbed.integrations.session import DriftSession
    from testbed.integrations.trl import DriftCallback, DriftReward, drift_dataset

    session = DriftSession("scenarios/style_shift.yaml", "runs/trl-grpo", arm="trl_grpo")
    reward = DriftReward(session)                       # clock="trainer_state" to follow the step counter
    trainer = GRPOTrainer(
        model=CHECKPOINT, processing_class=tokenizer, args=GRPOConfig(...),
        reward_funcs=reward, train_dataset=drift_dataset(session, 1024),
        callbacks=[DriftCallback(reward)],
    )
    trainer.train()                                     # then: python -m analysis.report runs/trl-grpo

`DriftReward` is a reward function in the form TRL 1.16's `GRPOTrainer(reward_funcs=...)` calls:
`reward(prompts=, completions=, completion_ids=, trainer_state=, **dataset columns)` -> one float
per completion, None (NaN to TRL) where the judge failed. It judges each completion at the next
clock value of the session, against the target and by the judge in force there, and writes the
testbed's episode rows. The clock counts judged completions (`clock="judged"`, the testbed's own),
or follows TRL's `trainer_state.global_step` (`clock="trainer_state"`: episode t of a step is
global_step x episodes_per_step + its index, so a run resumed from a TRL checkpoint meets its
switches where it met them). Every call judges on the clock: give it to the training only, not to
TRL's own evaluation (`eval_dataset`).

`DriftCallback` (a `TrainerCallback`) writes what needs the policy: the reference table before the
first step (the starting policy told each phase's target), the held-out `evals` every `eval.every`
episodes and at the end, one `updates` row per step (the clock, the judge counts, TRL's logged
loss), and closes the run directory when training ends. `drift_dataset` draws the scenario's
training prompts as a `datasets.Dataset` whose prompts are rendered when TRL reads them, at the
clock then (the candidate styles follow the schedule, as the testbed's env renders them).
"""

from __future__ import annotations

from typing import Any, Literal

from testbed.extras import require_extra

require_extra("trl", "the TRL reward function (testbed/integrations/trl.py)", ("trl", "datasets"))

import torch  # noqa: E402  (after the extra's check: say which extra, not "No module named")
from transformers import TrainerCallback  # noqa: E402

from testbed.engines.hf_engine import HFEngine  # noqa: E402
from testbed.integrations.session import DriftSession  # noqa: E402
from testbed.models.hub_tokenizer import HubTokenizer, chat_messages  # noqa: E402
from testbed.world.prompts import STYLES_LABEL  # noqa: E402

__all__ = ["DriftCallback", "DriftReward", "drift_dataset", "prompt_text"]


def prompt_text(prompt: Any) -> str:
    """The env's prompt text from what TRL passes: the text itself, or chat messages (the system
    message holds the candidate styles, as `chat_messages` writes them)."""
    if isinstance(prompt, str):
        return prompt
    system = " ".join(m["content"] for m in prompt if m.get("role") == "system")
    user = " ".join(m["content"] for m in prompt if m.get("role") == "user")
    return f"{user} {system}" if system.startswith(STYLES_LABEL) else user


def completion_text(completion: Any) -> str:
    """A completion's text: the text, or the assistant message's content (conversational)."""
    if isinstance(completion, str):
        return completion
    return "".join(m["content"] for m in completion if m.get("role") == "assistant")


class DriftReward:
    """TRL's reward function over a `DriftSession` (see the module docstring)."""

    __name__ = "drift_reward"  # TRL names a reward function's logged columns by it

    def __init__(
        self,
        session: DriftSession,
        clock: Literal["judged", "trainer_state"] = "judged",
        episodes_per_step: int | None = None,
    ) -> None:
        if clock not in ("judged", "trainer_state"):
            raise ValueError(f"clock: 'judged' or 'trainer_state', got {clock!r}")
        self.session, self.clock, self.episodes_per_step = session, clock, episodes_per_step
        self.group_size = 1  # TRL's num_generations (DriftCallback sets it): a prompt's completions are a group
        self.last: list[float] = []

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]] | None = None,
        trainer_state: Any = None,
        prompt_id: list[str] | None = None,
        **_: Any,
    ) -> list[float | None]:
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        t0 = None
        if self.clock == "trainer_state":
            if not self.episodes_per_step:
                raise ValueError(
                    "clock='trainer_state' needs episodes_per_step (the completions of one optimizer step); "
                    "DriftCallback sets it from the trainer's arguments"
                )
            t0 = step * self.episodes_per_step
        verdicts = self.session.judge_batch(
            [prompt_text(p) for p in prompts],
            [completion_text(c) for c in completions],
            prompt_id,
            t0=t0,
            version=step,
            group_size=self.group_size,
            tokens=[list(map(int, ids)) for ids in completion_ids] if completion_ids is not None else None,
        )
        self.last = [v.reward for v in verdicts if v.error is None]
        return [None if v.error is not None else v.reward for v in verdicts]


def engine_for(model: Any, processing_class: Any, session: DriftSession) -> HFEngine:
    """The testbed's sampling engine on TRL's model and tokenizer, with the scenario's sampling."""
    tokenizer: Any = HubTokenizer(processing_class, getattr(model, "generation_config", None), where="TRL's tokenizer")
    return HFEngine(model, tokenizer, session.scenario.sampling)


class DriftCallback(TrainerCallback):
    """Reference, held-out evaluations, update rows and the run directory's end (module docstring)."""

    def __init__(self, reward: DriftReward, evaluate: bool = True, reference: bool = True) -> None:
        self.reward, self.session = reward, reward.session
        self.do_evaluate, self.do_reference = evaluate, reference
        self.pending: dict[str, Any] | None = None  # this step's update row, until TRL logs the step

    def _engine(self, kwargs: dict[str, Any]) -> HFEngine | None:
        model, tok = kwargs.get("model"), kwargs.get("processing_class")
        return None if model is None or tok is None else engine_for(model, tok, self.session)

    def _sampled(self, fn: Any, kwargs: dict[str, Any]) -> None:
        """Run `fn(engine)` in eval mode under its own random stream: TRL's sampling stays as it was."""
        engine = self._engine(kwargs)
        if engine is None:
            return
        model = kwargs["model"]
        training = model.training
        model.eval()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.session.seed)
            fn(engine)
        model.train(training)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reward.group_size = int(getattr(args, "num_generations", 1) or 1)
        if self.reward.clock == "trainer_state" and not self.reward.episodes_per_step:
            self.reward.episodes_per_step = int(args.per_device_train_batch_size) * int(args.world_size)
        if self.do_reference and state.global_step == 0:
            self._sampled(self.session.reference, kwargs)
        if self.do_evaluate:  # the starting policy's held-out shares (due at clock 0)
            self._sampled(self.session.evaluate, kwargs)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._write_pending()
        rewards = self.reward.last
        metrics = {"reward_mean": sum(rewards) / len(rewards)} if rewards else {}
        # written once TRL has logged the step (on_log comes after on_step_end), or at the next step
        self.pending = {"trl_step": state.global_step, **metrics}
        if self.do_evaluate:
            self._sampled(self.session.evaluate, kwargs)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        logged = {f"trl_{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        self._write_pending(logged)

    def _write_pending(self, logged: dict[str, float] | None = None) -> None:
        if self.pending is not None:
            self.session.update({**self.pending, **(logged or {})})
            self.pending = None

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._write_pending()
        if self.do_evaluate:
            self._sampled(lambda engine: self.session.evaluate(engine, force=True), kwargs)
        self.session.close()


def drift_dataset(session: DriftSession, n: int, conversational: bool = True) -> Any:
    """`n` training prompts as a `datasets.Dataset` of `prompt` and `prompt_id`, each prompt rendered
    when TRL reads the row, with the candidate styles in force at the session's clock then
    (`conversational`: chat messages, the candidate styles in the system message, for a tokenizer
    with a chat template such as an exported testbed policy's; else the text)."""
    from datasets import Dataset

    rows = session.prompt_rows(n)

    def render(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        texts = [session.render(pid) for pid in batch["prompt_id"]]
        return {"prompt": [chat_messages(t) if conversational else t for t in texts], "prompt_id": batch["prompt_id"]}

    first = {"prompt": [chat_messages(r["prompt"]) if conversational else r["prompt"] for r in rows]}
    return Dataset.from_dict({**first, "prompt_id": [r["prompt_id"] for r in rows]}).with_transform(render)

"""StyleShiftEnv: a single-turn writing environment whose hidden target style drifts.

An episode is one prompt and one response. The env picks a prompt, asks the drift schedule for
the target at the current clock ``t``, renders the prompt with the target's candidate styles
(the style itself stays hidden from the policy), and has the judge score the response against
the target: reward = r_quality x r_style in {0, 1}.

**The drift clock.** ``env.clock`` is the number of *judged* training episodes so far. It
advances by one for every verdict without an error; a verdict with an error (the judge failed)
ends the episode but does not advance the clock: such an episode is not a training episode, it is
excluded and counted in ``env.judge_errors``. Evaluation episodes (``evaluate_batch``) never move
the clock. Set ``env.clock = n`` to resume a run at clock ``n``.

Two ways to use it:

- the Gymnasium API (``reset()`` / ``step(text)``), one episode at a time. ``step`` runs the async
  judge on the env's own event loop: ONE loop for the env's lifetime (so a judge's async client,
  its connection pool and its concurrency limit, live on one loop across steps), run with
  ``run_until_complete`` and closed by ``env.close()`` (or when the env is garbage-collected).
  When called from inside a running event loop (e.g. a notebook) it runs that same env loop in a
  worker thread and blocks until it is done, so in async code use the batched
  ``await env.astep_batch(...)`` instead.
- the batched path used by the training loop: ``starts = env.reset_batch(n)`` gives ``n``
  episodes at clocks ``t0 .. t0+n-1`` (``t0 = env.clock``), each with its own target and prompt;
  ``env.step_batch(starts, responses)`` (or ``await env.astep_batch(...)``) judges all responses
  in ONE judge call and advances the clock by the number of successful verdicts.
  ``reset_batch`` does not move the clock, so two calls before a ``step_batch`` get the same
  clocks. For held-out evaluation at clock ``t``: ``starts = env.eval_starts(specs, t)``, then
  ``env.evaluate_batch(starts, responses)`` (clock untouched).

**Seeding.** The constructor's ``seed`` seeds the prompt sampler (``self.np_random``).
Following Gymnasium's contract (the same seed and actions replay the same episodes),
``reset(seed=s)`` starts a fresh stream: it reseeds the sampler AND rewinds the clock to 0 (or to
``options["clock"]`` when given). ``reset()`` without a seed keeps the clock. So seed once, at the
start; do not pass a seed to every reset, or the target never drifts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import string
import weakref
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium
from gymnasium import spaces
from gymnasium.utils import seeding

from testbed.envs.episode import EpisodeStart, SingleTurn, episode_info, stream_id
from testbed.protocols import DEFAULT_JUDGE, DriftSchedule, Judge
from testbed.types import Target, Verdict

if TYPE_CHECKING:
    from testbed.world import PromptSpec

__all__ = ["EpisodeStart", "SingleTurn", "StyleShiftEnv", "episode_info"]

_T = TypeVar("_T")
_PRINTABLE = frozenset(string.printable)


def _run_sync(runner: asyncio.Runner, coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion on ``runner``'s loop (the env's own) from sync code. Inside a
    running loop (a notebook, an async app) that same loop runs in a worker thread instead,
    blocking the caller (async callers should await the ``a*`` methods). The check for a running
    loop is made before anything runs and outside any ``except`` block, so what the coroutine
    raises (a judge's TypeError) propagates with no "no running event loop" chained under it."""
    try:
        asyncio.get_running_loop()
        inside_a_loop = True
    except RuntimeError:
        inside_a_loop = False
    if not inside_a_loop:
        return runner.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(runner.run, coro).result()


class StyleShiftEnv(gymnasium.Env[str, str]):
    """Single-turn writing env with a hidden, drifting target style (see the module docstring).

    Observation: the rendered prompt (``Text(max_prompt_chars, charset=string.printable)``).
    Action: the response text (``Text(max_response_chars, charset=string.printable)``); any
    ``str`` is judged as given (the bounds describe the space, they are not enforced on actions).
    ``step`` returns ``reward = verdict.reward`` (0.0 when the judge failed: check
    ``info["judge_error"]`` and drop such episodes), ``terminated=True``, ``truncated=False``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (gymnasium.Env declares it an instance variable)

    def __init__(
        self,
        judge: Judge,
        schedule: DriftSchedule,
        prompt_specs: Sequence[PromptSpec],
        *,
        seed: int = 0,
        max_prompt_chars: int = 512,
        max_response_chars: int = 2048,
        render_mode: str | None = None,
        candidate_change_share: float = 1.0,
    ) -> None:
        if not callable(getattr(judge, "judge", None)):
            raise TypeError(
                f"judge must implement `async judge(requests) -> list[Verdict]`, got {type(judge).__name__}"
            )
        if not (callable(getattr(schedule, "target", None)) and callable(getattr(schedule, "switch_points", None))):
            raise TypeError(
                f"schedule must implement target(t) -> Target and switch_points(), got {type(schedule).__name__}"
            )
        self.prompt_specs = list(prompt_specs)
        if not self.prompt_specs:
            raise ValueError("prompt_specs is empty: the env needs at least one prompt")
        if render_mode is not None:
            raise ValueError(f"StyleShiftEnv has no render modes, got render_mode={render_mode!r}")
        self.render_mode = None
        # Imported here so that `testbed.envs` (schedules included) loads without the world.
        from testbed.world import render_prompt

        self._render_prompt = render_prompt
        if not 0.0 <= candidate_change_share <= 1.0:
            raise ValueError(f"candidate_change_share must be in [0, 1], got {candidate_change_share!r}")
        self.candidate_change_share = float(candidate_change_share)
        self.judge = judge
        self.schedule = schedule
        self.max_prompt_chars = int(max_prompt_chars)
        self.max_response_chars = int(max_response_chars)
        self.observation_space = spaces.Text(max_length=self.max_prompt_chars, min_length=0, charset=string.printable)
        self.action_space = spaces.Text(max_length=self.max_response_chars, min_length=0, charset=string.printable)
        self._np_random, self._np_random_seed = seeding.np_random(seed)
        self._clock = 0
        self._episode: EpisodeStart | None = None
        self.judge_errors = 0  # training episodes whose verdict had an error (not counted by the clock)
        # The env's one event loop (see the module docstring). asyncio.Runner owns it: it runs
        # each step with run_until_complete, turns Ctrl-C into a KeyboardInterrupt as asyncio.run
        # did, and on close cancels leftover tasks (a client library's background workers),
        # shuts down async generators and the default executor. Closed by close() or, for an env
        # nobody closes, when it is garbage-collected.
        self._runner = asyncio.Runner()
        self._finalizer = weakref.finalize(self, self._runner.close)
        # Fail at construction, not mid-run, if a prompt cannot fit the observation space.
        first = self._first = self._target(0)
        for spec in self.prompt_specs:
            self._render(spec, first)

    # ---- the drift clock -------------------------------------------------------------------
    @property
    def clock(self) -> int:
        """Judged training episodes so far; the clock the next episode gets."""
        return self._clock

    @clock.setter
    def clock(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"clock must be an int >= 0, got {value!r}")
        self._clock = value

    # ---- building episodes -----------------------------------------------------------------
    def _target(self, t: int) -> Target:
        target = self.schedule.target(t)
        target = Target(style=target.style, candidates=tuple(target.candidates))
        if target.style not in target.candidates:
            raise ValueError(
                f"schedule gave target style {target.style!r} at t={t}, not in its candidates {target.candidates}"
            )
        return target

    def _judge_at(self, t: int) -> str | None:
        """The judge in force at clock t, for a schedule that changes the judge (`judge_at`);
        None for one that does not (the scenario's judge)."""
        pick = getattr(self.schedule, "judge_at", None)
        return pick(t) if callable(pick) else None

    def _render(self, spec: PromptSpec, target: Target) -> str:
        text = self._render_prompt(spec, target.candidates)
        if len(text) > self.max_prompt_chars:
            raise ValueError(
                f"prompt {spec.prompt_id!r} renders to {len(text)} chars, over max_prompt_chars="
                f"{self.max_prompt_chars}; raise max_prompt_chars"
            )
        bad = sorted(set(text) - _PRINTABLE)
        if bad:
            raise ValueError(f"prompt {spec.prompt_id!r} has characters outside string.printable: {bad!r}")
        return text

    def _shown(self, prompt_id: str, target: Target) -> Target:
        """The target with the candidate list this prompt shows: the schedule's, or, for the prompt
        forms that do not follow it (world.candidate_change_share < 1), the first target's (which
        may not name the style now wanted: for them the prompt gives no sign of a switch)."""
        if self.candidate_change_share >= 1.0:
            return target
        from testbed.world.rules import candidates_shown

        shown = candidates_shown(prompt_id, target.candidates, self._first.candidates, self.candidate_change_share)
        return target if shown == target.candidates else Target(style=target.style, candidates=shown)

    def _start(self, spec: PromptSpec, t: int, stream: int | None = None) -> EpisodeStart:
        """A training episode at clock t (stream: its clock's), or, given a stream, another kind."""
        target = self._shown(spec.prompt_id, self._target(t))
        return EpisodeStart(
            prompt_text=self._render(spec, target),
            prompt_id=spec.prompt_id,
            topic=spec.topic,
            t=t,
            target=target,
            stream=stream_id(self._np_random_seed, "train", t) if stream is None else stream,
            judge=self._judge_at(t),
        )

    def _sample_specs(self, n: int) -> list[PromptSpec]:
        idx = self.np_random.integers(len(self.prompt_specs), size=n)
        return [self.prompt_specs[int(i)] for i in idx]

    # ---- judging ---------------------------------------------------------------------------
    async def _judge(self, starts: Sequence[EpisodeStart], responses: Sequence[str]) -> list[Verdict]:
        starts, responses = list(starts), list(responses)
        if len(starts) != len(responses):
            raise ValueError(f"got {len(starts)} episode starts but {len(responses)} responses")
        for r in responses:
            if not isinstance(r, str):
                raise TypeError(f"responses must be str, got {type(r).__name__}")
        if not starts:
            return []
        self._check_judges(starts)
        verdicts = await self.judge.judge([s.request(r) for s, r in zip(starts, responses)])
        verdicts = list(verdicts)
        if len(verdicts) != len(starts) or not all(isinstance(v, Verdict) for v in verdicts):
            raise RuntimeError(
                f"judge {type(self.judge).__name__} returned {len(verdicts)} items for {len(starts)} "
                "requests; a judge must return one Verdict per request, in order"
            )
        return verdicts

    def _check_judges(self, starts: Sequence[EpisodeStart]) -> None:
        """A start that names a judge (a schedule's `judge_at`) needs a judge that routes by name
        (testbed/judging/panel.py: `JudgePanel`, which `build_judge` gives a scenario with
        `judges:`); the scenario's own judge is "default" (or None)."""
        named = {s.judge for s in starts if s.judge is not None} - {DEFAULT_JUDGE}
        if not named:
            return
        known: frozenset[str] = getattr(self.judge, "judge_names", frozenset())
        if not named <= set(known):
            raise ValueError(
                f"the schedule asks for judge(s) {sorted(named)} (judge_at), but the env's judge "
                f"{type(self.judge).__name__} has {sorted(known) or 'no named judges'}: list them under the "
                "scenario's `judges:` (testbed.judging.build.build_judge makes the JudgePanel that routes them)"
            )

    # ---- batched path (the training loop) --------------------------------------------------
    @staticmethod
    def episode_clocks(t0: int, verdicts: Sequence[Verdict]) -> list[int]:
        """The clock value of each episode of a judged batch that started at ``t0``: judged
        episodes are numbered consecutively (the clock counts them); a failed one gets the clock
        at which it failed and does not count. ``reset_batch`` gave episode i the target at
        ``t0 + i``; after a failure inside a batch that straddles a switch, a later episode was
        judged against a target up to (failures before it) episodes ahead; its `target_style`
        records the one used."""
        clocks, t = [], t0
        for verdict in verdicts:
            clocks.append(t)
            t += verdict.error is None
        return clocks

    def reset_batch(self, n: int, repeat: int = 1, t0: int | None = None) -> list[EpisodeStart]:
        """``n * repeat`` training episodes: ``n`` prompts drawn with ``self.np_random``, each
        re-sampled ``repeat`` times in a row (GRPO's groups; every one is its own judged
        episode). The i-th episode has clock ``t0 + i`` (default ``t0 = env.clock``) and that
        clock's target; an asynchronous runtime passes the clock its in-flight episodes will
        reach. Does not move the clock."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be an int >= 1, got {repeat!r}")
        t0 = self._clock if t0 is None else t0
        specs = [spec for spec in self._sample_specs(n) for _ in range(repeat)]
        return [self._start(spec, t0 + i) for i, spec in enumerate(specs)]

    def retarget(self, start: EpisodeStart, t: int) -> EpisodeStart:
        """The same prompt text, judged at clock ``t``: its target is the one in force at ``t``
        (which differs from the generation-time target when a switch fell in between; on the
        simulated clock, also at the same `t`, when a switch in seconds fell in between)."""
        target, judge = self._shown(start.prompt_id, self._target(t)), self._judge_at(t)
        if t == start.t and target == start.target and judge == start.judge:
            return start
        return EpisodeStart(start.prompt_text, start.prompt_id, start.topic, t, target, start.stream, judge)

    async def astep_batch(self, starts: Sequence[EpisodeStart], responses: Sequence[str]) -> list[Verdict]:
        """Judge ``responses[i]`` for ``starts[i]`` in ONE judge call; advance the clock by the
        number of verdicts without an error (errors are counted in ``judge_errors``)."""
        verdicts = await self._judge(starts, responses)
        failed = sum(v.error is not None for v in verdicts)
        self._clock += len(verdicts) - failed
        self.judge_errors += failed
        return verdicts

    def step_batch(self, starts: Sequence[EpisodeStart], responses: Sequence[str]) -> list[Verdict]:
        """Sync ``astep_batch`` (see the module docstring about running event loops)."""
        return self._sync(self.astep_batch(starts, responses))

    # ---- episodes: what the policy writes for a round of starts ------------------------------
    def episode_runner(self) -> SingleTurn:
        """How an episode unfolds between its start and its final judge call, as a picklable
        callable `(engine, starts, review) -> trajectories` (a rollout actor runs it)."""
        return SingleTurn()

    def rollout(self, engine: Any, starts: Sequence[EpisodeStart]) -> list:
        """The trajectories of a round of starts, their last responses not yet judged; any
        judge call on the way (a multi-turn env's editor) is `evaluate_batch`: the clock stays."""
        return self.episode_runner()(engine, starts, self.evaluate_batch)

    # ---- evaluation (never moves the clock) ------------------------------------------------
    def eval_starts(self, specs: Sequence[PromptSpec], t: int, first: int = 0) -> list[EpisodeStart]:
        """Episodes for the given (e.g. held-out) prompts, all at clock ``t``, in order. No
        randomness, no clock change. Each has its own sampling stream (its index, from `first`)."""
        seed = self._np_random_seed
        return [self._start(spec, t, stream_id(seed, "eval", t, first + i)) for i, spec in enumerate(specs)]

    def told_target_starts(self, specs: Sequence[PromptSpec], t: int) -> list[EpisodeStart]:
        """As `eval_starts`, but each prompt offers only the target style at ``t``: the episodes of
        a reference policy told the target (`testbed/runtimes/reference_policy.py`)."""
        target = self._target(t)
        told = Target(style=target.style, candidates=(target.style,))
        return [
            EpisodeStart(
                prompt_text=self._render(spec, told),
                prompt_id=spec.prompt_id,
                topic=spec.topic,
                t=t,
                target=told,
                stream=stream_id(self._np_random_seed, "told", t, i),
                judge=self._judge_at(t),
            )
            for i, spec in enumerate(specs)
        ]

    async def aevaluate_batch(self, starts: Sequence[EpisodeStart], responses: Sequence[str]) -> list[Verdict]:
        """Judge evaluation responses in one judge call. The clock and ``judge_errors`` are untouched."""
        return await self._judge(starts, responses)

    def evaluate_batch(self, starts: Sequence[EpisodeStart], responses: Sequence[str]) -> list[Verdict]:
        """Sync ``aevaluate_batch``."""
        return self._sync(self.aevaluate_batch(starts, responses))

    def score_with(self, judge: Judge, starts: Sequence[EpisodeStart], responses: Sequence[str]) -> list[Verdict]:
        """Another judge's verdicts (a gold judge beside the training one), on the env's loop; the
        clock and ``judge_errors`` are untouched."""
        return self._sync(judge.judge([s.request(r) for s, r in zip(starts, responses)])) if starts else []

    # ---- Gymnasium API ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start one episode at the current clock. Returns ``(prompt_text, info)`` with info
        ``prompt_id, topic, t, candidates`` (the target style stays hidden until ``step``).
        ``seed`` reseeds the sampler and rewinds the clock to 0; ``options={"clock": n}`` sets
        the clock first."""
        super().reset(seed=seed)
        if seed is not None:
            self._clock = 0
        if options and "clock" in options:
            self.clock = options["clock"]
        start = self._start(self._sample_specs(1)[0], self._clock)
        self._episode = start
        return start.prompt_text, {
            "prompt_id": start.prompt_id,
            "topic": start.topic,
            "t": start.t,
            "candidates": start.target.candidates,
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Judge ``action`` for the episode opened by ``reset``; the episode always terminates.
        Info: ``target_style, judged_style, r_quality, r_style, t, judge_error, prompt_id, topic``.
        The observation is the same prompt text."""
        if self._episode is None:
            raise RuntimeError("no open episode: call reset() before step() (episodes are single-turn)")
        start, self._episode = self._episode, None
        verdict = self.step_batch([start], [action])[0]
        reward = 0.0 if verdict.error is not None else float(verdict.reward)
        return start.prompt_text, reward, True, False, episode_info(start, verdict)

    def _sync(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if not self._finalizer.alive:
            coro.close()  # never started: no "never awaited" warning
            raise RuntimeError("the env is closed (env.close() was called); make a new env")
        return _run_sync(self._runner, coro)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The env's event loop (every sync step runs on it)."""
        if not self._finalizer.alive:
            raise RuntimeError("the env is closed (env.close() was called)")
        return self._runner.get_loop()

    def close(self) -> None:
        """Close the env's event loop (idempotent; a later sync step raises RuntimeError). The
        judge is not closed: it may serve other envs, and whoever built it closes it."""
        self._finalizer()
        super().close()

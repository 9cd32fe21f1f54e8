"""The Ray runtime for one arm x seed: rollout actors generate continuously, the driver judges and
owns the drift clock, a learner (group) trains on a bounded queue of judged single rollouts.

    driver                         rollout actors (N)            learner group (M, gloo)
    issue round (target at t_gen) -> generate with version v  ->
    judge at t_judge, store rows  <-
    dequeue a batch, drop stale   ----------------------------> update -> version v+1, weights
    publish weights by version    <----------------------------

- **The clock.** Only the driver's env judges, so `t` stays 0..budget-1 without gaps or
  duplicates however many actors generate. Each episode keeps the target at generation time and
  at judge time; around a switch they differ.
- **Staleness.** An episode generated with version v and trained at version v' has staleness
  v' - v. A round is issued only while the updates that will happen before its batch trains
  number at most `max_staleness` (AReaL's gate), and at dequeue anything older is dropped,
  stored (`dropped.parquet`) and counted, never trained on. DIS corrects the rest.
- **Faults.** A rollout actor that dies is restarted and its round is sent again (it was not judged,
  so nothing is lost or counted twice). A learner that dies stops the run (`RunStopped`): the
  last checkpoint on disk is what `--resume` continues from.

With one rollout worker and `max_staleness: 0` the order of every generation, judgement,
evaluation and update is the synchronous loop's, and so are the rows.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import ray
import torch

from testbed import device
from testbed.models import lora
from testbed.models.tokenizer import WordTokenizer
from testbed.runtimes import checkpoint
from testbed.runtimes.collect import Round
from testbed.runtimes.learn import RunStopped
from testbed.runtimes.ray.learner import LearnerGroup
from testbed.runtimes.ray.rollout import ActorEngine, RolloutActor
from testbed.runtimes.ray.trainer_factory import LearnerProxy, TrainerFactory
from testbed.runtimes.runner import ArmRunner, make_engine, make_trainer, seed_everything
from testbed.scenario.schema import ArmConfig, Scenario

ACTOR_DIED = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError)


def check_gpus(per_actor: float, actors: int) -> None:
    """Refuse, naming the field, actors whose GPUs the cluster does not have: Ray would leave them
    pending for ever."""
    have = ray.cluster_resources().get("GPU", 0.0)
    if per_actor * actors > have:
        raise RunStopped(
            f"runtime.actor_gpus is {per_actor:g} for each of {actors} rollout actors and learners, "
            f"{per_actor * actors:g} GPUs, but the Ray cluster has {have:g}: set runtime.actor_gpus to at most "
            f"{have / actors:.3g} (a share of one GPU) or use fewer workers"
        )


class RayRunner(ArmRunner):
    def __init__(
        self,
        scenario: Scenario,
        arm: ArmConfig,
        seed: int,
        *,
        base_policy: torch.nn.Module,
        tokenizer: WordTokenizer,
        **kw: Any,
    ):
        super().__init__(scenario, arm, seed, **kw)
        rt = self.rt = scenario.runtime_for(arm)
        seed_everything(seed)
        state = {k: v.detach().clone() for k, v in base_policy.state_dict().items()}  # on the CPU: it travels
        # The driver's copy samples and runs the trainer's warm-up (SAO's value pretraining): on the device too.
        policy = copy.deepcopy(base_policy).to(device.for_this_process(rt.device))
        self.local_engine = make_engine(scenario, policy, tokenizer)  # the warm-up samples the starting policy here
        self.name = f"testbed-{self.store.root.name}-{arm.name}-seed{seed}"  # named, so a fault test can find them
        gpus = device.gpus(rt, "actor")
        check_gpus(gpus, rt.rollout_workers + rt.learner_workers)
        self.learner = self.start_learners(scenario, arm, seed, policy, state, tokenizer.pad_id, gpus)
        # the shadow trains nothing; with policy.lora its adapters say how to merge a checkpoint's policy
        lora_settings = scenario.policy.lora
        shadow_policy = lora.attach(copy.deepcopy(policy), lora_settings, seed) if lora_settings else policy
        self.trainer = LearnerProxy(make_trainer(arm, shadow_policy, tokenizer, scenario, seed), self.learner)
        self.merge = lora.merge_plan(shadow_policy) if lora_settings else None
        # the starting policy, once in the object store: every rollout actor (and a restarted one) starts from it
        starting = ray.put(state)
        self.weights = [starting]
        self.new_actor = self.rollout_actor_factory(scenario, policy.config, starting, tokenizer, seed, gpus)
        self.restarts = 0
        self.actors = [self.new_actor(i) for i in range(rt.rollout_workers)]
        self.eval_engine = ActorEngine(self, 0)
        self.inflight: dict[ray.ObjectRef, tuple[int, Round, Any]] = {}  # ref -> (actor index, round, actor)
        self.update_ref: ray.ObjectRef | None = None
        self.update_started = 0.0
        self.busy = Counter()  # seconds: "rollout" (summed over actors), "learner"
        self.staleness = Counter()  # staleness of every episode trained on

    def start_learners(
        self, scenario: Scenario, arm: ArmConfig, seed: int, policy: Any, state: dict, pad_id: int, gpus: float
    ) -> LearnerGroup:
        """The remote learner group: `learner_workers` actors, each building the arm's trainer from `state`."""
        rt = self.rt
        factory = TrainerFactory(
            arm,
            policy.config,
            state,
            pad_id,
            scenario.sampling.temperature,
            seed,
            rt.torch_threads,
            scenario.engine.measure_mismatch,
            rt.device,
            rt.micro_batch_tokens,
            scenario.policy.lora,
        )
        return LearnerGroup(
            factory,
            rt.learner_workers,
            torch_threads=rt.torch_threads,
            actor_cpus=rt.actor_cpus,
            actor_gpus=gpus,
            name=self.name,
            strategy=rt.learner_strategy,
            fsdp=rt.fsdp,
        )

    def rollout_actor_factory(
        self, scenario: Scenario, config: Any, starting: ray.ObjectRef, tokenizer: WordTokenizer, seed: int, gpus: float
    ) -> Callable[[int], Any]:
        """Rollout actor i, named by its restart count (a restarted one starts from `starting` too)."""
        rt, spec = self.rt, (scenario.engine.type, scenario.engine.args)
        scenario_data = scenario.model_dump(mode="json", by_alias=True)  # an actor builds its editor's judge from it
        return lambda i: RolloutActor.options(
            num_cpus=rt.actor_cpus, num_gpus=gpus, name=f"{self.name}-rollout{i}-r{self.restarts}"
        ).remote(
            config,
            starting,  # a ref as an argument: Ray hands each actor the value
            tokenizer,
            spec,
            scenario.sampling,
            seed + 1000 * i,
            rt.torch_threads,
            self.env.episode_runner(),
            scenario_data,
            rt.device,
        )

    def start(self, resume: dict | None, policy_key: str, starting_engine: Any = None) -> None:
        super().start(resume, policy_key, self.local_engine)
        self.next_group = self.state.groups  # group ids of issued rounds, judged or not
        if resume is None and self.trainer.warmup_samples > 0:
            self.learner.load_warmup_state(device.to_cpu(self.trainer.shadow.warmup_state()))
        if resume is not None and checkpoint.SHARDED in resume["trainer"]:  # the learners gather its policy
            self.publish(self.learner.policy(), self.trainer.version)
        elif resume is not None:  # the actors start from the checkpoint's policy
            if "policy" not in resume["trainer"]:
                raise RunStopped(
                    "the Ray runtime resumes a trainer whose state_dict() holds its policy weights under 'policy'"
                )
            policy_state = resume["trainer"]["policy"]
            if self.merge is not None:  # the checkpoint holds base and adapters; the actors a plain model
                policy_state = lora.merged_weights(policy_state, self.merge)
            self.publish([ray.put(policy_state)], self.trainer.version)

    def save_checkpoint(self, **kw: Any) -> None:
        self.finish_update()  # the learner's state and the recorded updates must agree
        if self.learner.sharded_checkpoints:  # each rank writes its shards beside the checkpoint file
            where = (self.store.root, self.arm.name, self.seed, self.state.updates)
            self.trainer.sharded_to = checkpoint.sharded_dir(*where, final=kw.get("final", False))
        try:
            super().save_checkpoint(**kw)
        finally:
            self.trainer.sharded_to = None

    def publish(self, weights: list[ray.ObjectRef], version: int) -> None:
        """The rollout actors' next weights: refs to the parts of a policy state_dict (the learner's
        buckets, or one whole state put by the driver), which each actor loads one by one."""
        self.weights, self.trainer.version = weights, version

    def submit_generation(self, index: int, starts: list) -> ray.ObjectRef:
        return self.actors[index].rollout.remote(starts, self.weights, self.trainer.version)

    # -- the loop ---------------------------------------------------------------------------------

    def loop(self) -> None:
        epu = self.trainer.episodes_per_update
        while (
            self.env.clock < self.budget
            or self.inflight
            or self.update_ref is not None
            or len(self.state.buffer) >= epu
        ):  # the synchronous loop trains the last full batch too
            self.start_update()
            if self.env.clock < self.budget and self.env.clock >= self.state.next_eval:
                self.finish_update()  # evaluate the newest policy, as the synchronous loop does
                self.start_update()
                self.finish_update()
                self.evaluate_if_due()
            self.issue_rounds()
            self.start_update()
            waiting = list(self.inflight) + ([self.update_ref] if self.update_ref is not None else [])
            if not waiting:
                continue
            with self.timer.part("waiting"):
                ready, _ = ray.wait(waiting, num_returns=1)
            if ready[0] == self.update_ref:
                self.finish_update()
            else:
                self.finish_generation(ready[0])
            self.show_progress()

    def updates_ahead(self) -> int:
        """Updates that will happen before a round issued now is trained on."""
        pending = sum(len(r.starts) for _, r, _ in self.inflight.values())
        return (self.update_ref is not None) + (len(self.state.buffer) + pending) // self.trainer.episodes_per_update

    def issue_rounds(self) -> None:
        epu, group = self.trainer.episodes_per_update, self.trainer.group_size
        lag = self.max_staleness or 0  # always set on ray (RuntimeConfig.staleness_limit)
        limit = self.rt.queue_size or (lag + 2) * epu
        busy = {i for i, _, _ in self.inflight.values()}
        for i in range(len(self.actors)):
            pending = sum(len(r.starts) for _, r, _ in self.inflight.values())
            if i in busy or self.env.clock + pending >= self.budget or self.updates_ahead() > lag:
                continue
            if len(self.state.buffer) + pending + epu > limit:
                continue
            with self.timer.part("bookkeeping"):
                round_ = self.collector.issue(max(1, epu // group), self.next_group, pending)
            self.next_group += max(1, epu // group)
            self.inflight[self.submit_generation(i, round_.starts)] = (i, round_, self.actors[i])

    def finish_generation(self, ref: ray.ObjectRef) -> None:
        index, round_, actor = self.inflight.pop(ref)
        try:
            trajs, seconds = ray.get(ref)
        except ACTOR_DIED as exc:
            self.restart_actor(index, round_, exc, actor)
            return
        self.busy["rollout"] += seconds
        with self.timer.part("judging"):
            trajs = self.collector.judge(round_, trajs)
        self.record_round(trajs)

    def restart_actor(self, index: int, round_: Round | None, exc: Exception, dead: Any) -> None:
        """A lost actor's round was never judged: start a new actor (unless it was already
        replaced) and send the round again."""
        if self.actors[index] is dead:
            self.restarts += 1
            self.log(
                f"{self.arm.name} seed {self.seed}: rollout actor {index} died ({type(exc).__name__}); restarting it"
            )
            self.actors[index] = self.new_actor(index)
        if round_ is not None:
            self.inflight[self.submit_generation(index, round_.starts)] = (index, round_, self.actors[index])

    def call_now(self, index: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """A blocking call on a rollout actor (held-out evaluation: `generate`, `extend`) with the
        newest weights, that survives the actor's death."""
        while True:
            actor = self.actors[index]
            try:
                return ray.get(getattr(actor, method).remote(*args, self.weights, self.trainer.version, **kwargs))
            except ACTOR_DIED as exc:
                self.restart_actor(index, None, exc, actor)

    def start_update(self) -> None:
        if self.update_ref is not None:
            return
        batch = self.next_batch()  # drops what is too stale
        if batch is None:
            return
        self.staleness.update(self.trainer.version - t.policy_version for t in batch)
        self.batch_staleness = [self.trainer.version - t.policy_version for t in batch]
        self.record_trained(batch)
        self.update_started = time.perf_counter()
        self.update_ref = self.learner.update(batch)

    def finish_update(self) -> None:
        if self.update_ref is None:
            return
        ref, self.update_ref = self.update_ref, None
        try:
            metrics, version, weights = ray.get(ref)  # the weights stay in the object store: refs
        except ACTOR_DIED as exc:
            raise RunStopped(
                f"arm {self.arm.name} seed {self.seed}: the learner failed at update {self.state.updates + 1} "
                f"({type(exc).__name__}: {exc}). Continue from the last checkpoint with --resume "
                f"{self.store.root}."
            ) from None
        self.busy["learner"] += time.perf_counter() - self.update_started
        self.timer.seconds["training"] += time.perf_counter() - self.update_started
        self.publish(weights, version)
        stale = self.batch_staleness
        metrics = {**metrics, "staleness_mean": sum(stale) / len(stale), "staleness_max": max(stale)}
        self.record_update(metrics)

    def totals(self) -> dict[str, Any]:
        totals = super().totals()
        wall = max(totals["wall_s"], 1e-9)
        totals["runtime"] = {
            "kind": "ray",
            "rollout_workers": len(self.actors),
            "learner_workers": self.rt.learner_workers,
            "max_staleness": self.max_staleness,
            "actor_restarts": self.restarts,
            "staleness_histogram": {str(k): v for k, v in sorted(self.staleness.items())},
            "rollout_idle_share": round(1 - self.busy["rollout"] / (wall * len(self.actors)), 3),
            "learner_idle_share": round(1 - self.busy["learner"] / wall, 3),
        }
        return totals

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.learner.shutdown()


def run_arm_ray(
    scenario: Scenario,
    arm: ArmConfig,
    seed: int,
    *,
    base_policy: torch.nn.Module,
    tokenizer: WordTokenizer,
    policy_key: str = "",
    resume: dict | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """`testbed.runtimes.loop.run_arm` on the Ray runtime: same arguments, same rows."""
    runner = RayRunner(scenario, arm, seed, base_policy=base_policy, tokenizer=tokenizer, **kw)
    try:
        runner.start(resume, policy_key)
        return runner.run()
    finally:
        runner.close()

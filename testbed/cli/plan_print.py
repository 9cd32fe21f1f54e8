"""Print a run's plan (testbed/cli/plan.py) with rich: one table per part. Every value printed is data,
never markup (a scenario's text may hold '[...]')."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.models.memory import size


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


def _args(args: Any) -> str:
    """Arguments on one line; an env var shows as NAME (set | not set)."""
    if isinstance(args, dict) and set(args) == {"env_var", "set"}:
        return f"${args['env_var']} ({'set' if args['set'] else 'not set'})"
    if isinstance(args, dict):
        return "{" + ", ".join(f"{k}: {_args(v)}" for k, v in args.items()) + "}"
    if isinstance(args, list):
        return "[" + ", ".join(_args(v) for v in args) + "]"
    return json.dumps(args) if not isinstance(args, str) else args


def _range(calls: dict[str, int]) -> str:
    return _n(calls["max"]) if calls["min"] == calls["max"] else f"{_n(calls['min'])} - {_n(calls['max'])}"


def _table(title: str, *columns: str) -> Table:
    table = Table(
        title=title, title_justify="left", title_style="bold", show_header=bool(columns), box=None, padding=(0, 2)
    )
    for c in columns or ("", ""):
        table.add_column(c)
    return table


def _rows(table: Table, rows: list[tuple[Any, ...]]) -> Table:
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    return table


def models_table(plan: dict[str, Any]) -> Table:
    p = plan["policy"]
    what = (
        f"checkpoint {p['checkpoint']}"
        if "checkpoint" in p
        else ", ".join(f"{k} {v}" for k, v in p["shape"].items()) + f", vocab {p['vocab_size']}"
    )
    moe = f" (top-{p['top_k']} of {p['num_experts']} experts)" if p.get("num_experts") else ""
    rows = [
        ("policy", f"{p['family']}: {what}"),
        ("parameters", f"{_n(p['parameters'])} total, {_n(p['active_parameters'])} active per token{moe}"),
    ]
    if lora := p.get("lora"):
        rows.append(
            (
                "LoRA",
                f"r {lora['r']}, alpha {lora['alpha']:g}, dropout {lora['dropout']:g} on {', '.join(lora['targets'])}: "
                f"{_n(lora['adapters'])} adapter parameters train, the base is frozen and is the KL reference",
            )
        )
    for s in plan["starting_policies"]:
        seeds = ", ".join(map(str, s["seeds"]))
        if "checkpoint" in s:
            rows.append((f"start (seeds {seeds})", f"checkpoint {s['checkpoint']}"))
        else:
            state = (
                "cached"
                if s["cached"]
                else (
                    f"would train: up to {s['max_rounds']} x {s['steps_per_round']} steps on "
                    f"{_n(s['corpus_size'])} pieces, up to {_n(s['acceptance_samples_max'])} "
                    "embedded-rubric acceptance verdicts"
                )
            )
            rows.append((f"SFT (seeds {seeds})", f"sft.seed {s['sft_seed']}, {state}: {s['cache']}"))
    for a in plan["arms"]:
        if a["critic"]:
            c = a["critic"]
            parts = ", ".join(
                f"{k.removeprefix('trainable_')} {_n(v)}" for k, v in c.items() if k.startswith("trainable_")
            )
            rows.append(
                (
                    f"critic ({a['name']})",
                    f"{_n(c['total'])} total, {_n(c['trainable'])} trainable ({parts}), {_n(c['frozen'])} frozen",
                )
            )
        ref = a["reference"]
        rows.append(
            (
                f"reference ({a['name']})",
                "none (kl_coef 0)"
                if not ref
                else f"the policy with its LoRA adapters off (no copy), kl_coef {ref['kl_coef']}"
                if ref.get("shared")
                else f"frozen starting policy, {_n(ref['parameters'])} parameters, kl_coef {ref['kl_coef']}",
            )
        )
    return _rows(_table("Models"), rows)


def judges_table(plan: dict[str, Any]) -> Table:
    rows = []
    for field in ("judge", "gold_judge"):
        j = plan[field]
        if j is None:
            continue
        how = "args checked by its Config, not built" if j["check"] == "checked" else f"{j['check']}, closed"
        share = f", scores {j['share']:.0%} of episodes" if "share" in j else ""
        rows.append((field.replace("_", " "), f"{j['type']} ({j['path']}), args {_args(j['args'])}; {how}{share}"))
    for name, j in plan.get("judges", {}).items():  # more judges the schedule switches to
        how = "args checked by its Config, not built" if j["check"] == "checked" else f"{j['check']}, closed"
        rows.append((f"judge {name}", f"{j['type']} ({j['path']}), args {_args(j['args'])}; {how}"))
    rows.append(("world", _args(plan["world"])))
    rows.append(("env", f"{plan['env']['type']} {_args(plan['env']['args'])}"))
    return _rows(_table("Judges and world"), rows)


def schedule_table(plan: dict[str, Any]) -> Table:
    s = plan["schedule"]
    unit = s.get("unit", "episodes")
    judged = any("judge" in p for p in s["phases"])  # a schedule that changes the judge: which one, when
    table = _table(
        f"Schedule ({s['type']}; switches at {unit} {', '.join(map(_n, s['switch_points'])) or 'none'})",
        unit,
        "target",
        "candidates",
        *(["judge"] if judged else []),
    )
    _rows(
        table,
        [
            (
                f"{_n(p['start'])} - {_n(p['end'])}",
                p["style"],
                ", ".join(p["candidates"]),
                *([p["judge"]] if judged else []),
            )
            for p in s["phases"]
        ],
    )
    if s["phases_left_out"]:
        table.add_row(f"... {s['phases_left_out']} more", "", "", *([""] if judged else []))
    return table


def arms_table(plan: dict[str, Any]) -> Table:
    rows = []
    for a in plan["arms"]:
        w = a["warmup"]
        warm = (
            ""
            if not w["samples"]
            else (
                f"; warm-up {_n(w['samples'])} judged samples per starting policy, {w['runs']} to run "
                f"({sum(w['files'].values())} of {len(w['files'])} cached)"
            )
        )
        runtime = a["runtime"]["kind"] + "".join(f", {k} {v}" for k, v in a["runtime"].items() if k != "kind")
        rows.append(
            (
                a["name"],
                f"{a['trainer']} ({a['path']}), {a['episodes_per_update']} episodes per update "
                f"(group {a['group_size']}), runtime {runtime}{warm}",
            )
        )
        rows.append(("", f"args {_args(a['args'])}" + (f", env {_args(a['env'])}" if a["env"] else "")))
    return _rows(_table(f"Arms (seeds {', '.join(map(str, plan['seeds']))})"), rows)


def simulation_rows(sim: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The simulated cluster's settings (runtime.kind: simulated), one row each part."""
    if not sim:
        return []
    return [
        (
            "simulated cluster",
            f"{sim['rollout_slots']} rollout slots, staleness policy {sim['staleness_policy']}, "
            f"rounds of {sim['issue_size'] or 'one group'}, evaluations {sim['evaluation']}",
        ),
        ("  latency (s)", ", ".join(f"{k} {v}" for k, v in sim["latency"].items())),
        ("  learner (s)", ", ".join(f"{k} {v}" for k, v in sim["learner"].items())),
    ]


def budget_table(plan: dict[str, Any]) -> Table:
    rt, ep, calls = plan["runtime"], plan["episodes"], plan["judge_calls"]
    ray = f"Ray{' at ' + _args(rt['address']) if rt['address'] else ' (local)'}" if rt["ray"] else "no Ray"
    evals = ", ".join(f"{k} {_n(v)}" for k, v in ep["eval"]["per_arm_seed"].items())
    rows = [
        (
            "runtime",
            f"{rt['kind']}, parallel arms {'on' if rt['parallel_arms'] else 'off'}, {ray}, task cpus "
            f"{rt['task_cpus']}, "
            f"torch threads {rt['torch_threads']}, numerics {rt['numerics']}",
        ),
        (
            "device",
            f"{rt['device']} -> {rt['resolved_device']}"
            + (f", GPUs per actor {rt['actor_gpus']:g}, per task {rt['task_gpus']:g}" if rt["ray"] else ""),
        ),
        ("episodes", f"{_n(ep['per_arm_seed'])} per arm x seed x {ep['arm_seeds']} = {_n(ep['total'])}"),
        *simulation_rows(rt.get("simulation")),
        (
            "evaluation",
            f"every {_n(ep['eval']['every'])} episodes on {ep['eval']['prompts']} held-out prompts: {evals} "
            "episodes per arm x seed",
        ),
    ]
    rows += [(f"judge calls, {k}", _range(calls[k])) for k in ("training", "eval", "warmup", "gold")]
    rows.append(("judge calls, total", _range(calls["total"]) + " (estimated; a failed call costs one more)"))
    rows.append(("run directory", f"{plan['run_directory']} (not created by a dry run)"))
    return _rows(_table("Runtime, episodes and judge calls"), rows)


def memory_table(plan: dict[str, Any]) -> Table:
    """Per arm and process: the bytes of each item, the total, against the device (testbed/models/memory.py)."""
    memory = plan["memory"]
    table = Table(title=f"memory plan (device memory from {memory['device_source']})", title_justify="left")
    for column in ("arm", "process", "items", "total", "fits"):
        table.add_column(column)
    for arm, p in memory["arms"].items():
        for process, entry in p["processes"].items():
            items = ", ".join(f"{k} {size(v)}" for k, v in entry["items"].items() if v)
            fits = "yes" if entry["total"] <= p["budget_bytes"] else "NO"
            table.add_row(
                escape(arm), process, escape(items), size(entry["total"]), f"{fits} (of {size(p['budget_bytes'])})"
            )
    return table


def print_plan(plan: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    s = plan["scenario"]
    console.print(
        f"[bold]Plan of {escape(s['name'])}[/] ({escape(s['source'])}, digest {s['digest']}): "
        f"{escape(s['description'])}",
        highlight=False,
    )
    tables = [models_table(plan), judges_table(plan), schedule_table(plan), arms_table(plan), budget_table(plan)]
    for table in tables + [memory_table(plan)]:
        console.print(table, highlight=False)
        console.print()
    for warning in plan["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    console.print("dry run: nothing trained, no run directory written, no cache touched", highlight=False)

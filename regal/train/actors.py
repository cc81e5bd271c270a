"""Actor side (numpy only: worker processes unpickle `run_rollout`, so nothing here may
load TensorFlow): one BRKGA rollout per `RolloutTask`, the rollout workers, the cache of
uniform-BRKGA baselines and the rewards of a batch of rollouts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from regal.files import write_json
from regal.graph import ComputationGraph
from regal.workers import Workers


@dataclass(frozen=True)
class RolloutTask:
    """One BRKGA run; `params` are `regal.search.pipeline.brkga_phase` keywords (empty =
    plain BRKGA) and, optionally, `polish_share`: that share of the budget goes to a climb
    from BRKGA's best (`regal.search.pipeline.run_pipeline`, as the `regal` method runs), or
    `race`: the `regal` method's whole schedule (`DEFAULT_SCHEDULE`, fresh climbs and race)."""

    graph: ComputationGraph
    devices: int
    budget: int
    seed: int
    objective: str = "peak_memory"
    population_size: int = 100
    params: dict = field(default_factory=dict)


def run_rollout(task: RolloutTask) -> float:
    """BRKGA with the task's search parameters (then the polish, if it has a share); returns
    the best objective found."""
    from regal.optimizers import Problem
    from regal.search.pipeline import run_pipeline
    from regal.search.schedule import DEFAULT_SCHEDULE, Schedule
    from regal.sim import DeviceSpec

    problem = Problem(task.graph, DeviceSpec(task.devices), task.objective)
    params = dict(task.params)
    share = float(params.pop("polish_share", 0.0))   # 0: BRKGA only, draw for draw
    # without `race` no fresh climb from the heuristic starts: alone it would not depend on
    # the policy's action (with it, the race decides whether the action's basin counts)
    schedule = DEFAULT_SCHEDULE if params.pop("race", False) \
        else Schedule(share, fresh_climbs=0, race=())
    solution = run_pipeline(problem, task.budget, task.seed, params, schedule=schedule,
                            population_size=task.population_size)
    return float(solution.value)


def make_actors(workers: int = 2, use_ray: bool = False) -> Workers:
    """The rollout workers (`actors.map(run_rollout, tasks)`): a process pool whose workers
    leave Ctrl-C to the loop (which checkpoints), Ray (a task whose worker died runs again, as
    Ray's default of 3 retries has it), or this process for one worker."""
    return Workers(workers, ray=use_ray, ignore_interrupts=True, retries=3)


class BaselineCache:
    """Uniform-BRKGA objective per (graph, devices, seed, budget, objective), kept on disk."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.values: dict[str, float] = {}
        if path is not None and path.exists():
            # float(): an infinite value is stored as "Infinity" (regal.files.json_text)
            self.values = {key: float(value)
                           for key, value in json.loads(path.read_text()).items()}

    @staticmethod
    def key(graph: ComputationGraph, devices: int, seed: int, budget: int, objective: str,
            population_size: int) -> str:
        return f"{graph.fingerprint()}|{devices}|{seed}|{budget}|{objective}|{population_size}"

    def save(self) -> None:
        if self.path is not None:
            write_json(self.path, self.values, sort_keys=True)


def rollout_rewards(actors, cache: BaselineCache, jobs: list[tuple]) -> list[float]:
    """Rewards of `jobs` = [(graph, devices, seed, params, budget, objective, population)];
    uniform baselines come from `cache` or run in the same batch as the policy's rollouts."""
    keys = [BaselineCache.key(g, d, s, b, o, p) for g, d, s, _, b, o, p in jobs]
    missing = {}
    for key, (g, d, s, _, b, o, p) in zip(keys, jobs):
        if key not in cache.values and key not in missing:
            missing[key] = RolloutTask(g, d, b, s, o, p)
    tasks = [RolloutTask(g, d, b, s, o, p, params) for g, d, s, params, b, o, p in jobs]
    values = actors.map(run_rollout, tasks + list(missing.values()))
    cache.values.update(zip(missing, values[len(tasks):]))
    rewards = []
    for key, value in zip(keys, values[:len(tasks)]):
        base = cache.values[key]
        rewards.append((base - value) / base if base > 0 else 0.0)
    return rewards

"""The loop (`train`): supervised pretraining steps, then REINFORCE steps, validation,
TensorBoard scalars and checkpoints; stops on `steps`, `max_minutes` or SIGTERM/SIGINT."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import regal.tfenv
from regal.files import JsonLinesWriter
from regal.regal_method import UNIFORM_MUTANT_FRACTION
from regal.stop_flag import StopFlag
from regal.train.actors import BaselineCache, make_actors, rollout_rewards
from regal.train.checkpoints import (_in_use, _prepare_run, _read_checkpoint, _trim_history,
                                     save_checkpoint)
from regal.train.config import BASELINES_FILE, HISTORY_FILE, TrainConfig
from regal.train.learner import Episode, Learner
from regal.train.pretrain import _target_tables, read_best_known, supervised_targets
from regal.train.sources import GraphSource, graph_source
from regal.workers import Workers


def _validate(policy, val: GraphSource, config: TrainConfig, actors, cache) -> float:
    """Mean improvement of the greedy policy over uniform BRKGA on fixed val graphs and seeds."""
    return float(np.mean(validation_rewards(
        policy, val, range(min(config.val_graphs, val.count)), config.devices, config.val_seeds,
        config.budget, actors, cache, config.objective, config.population_size,
        polish_share=config.polish_share, race=config.race, **config.search_kwargs())))


def validation_rewards(policy, val: GraphSource, indices, devices=(2, 4), seeds: int = 2,
                       budget: int = 1000, actors=None, cache=None, objective="peak_memory",
                       population_size: int = 100, seed_population: bool = True,
                       uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION,
                       polish_share: float = 0.0, race: bool = False) -> np.ndarray:
    """Greedy policy vs uniform BRKGA, `[graph, seed]` relative improvements: graph `i` of
    `val` on `devices[i % len(devices)]` devices with BRKGA seeds 1000.. (the measurement
    `train` logs as val_improvement; usable to compare any two stored policies). With
    `polish_share` the policy's runs end with the local-search polish (BRKGA's do not), with
    `race` they run the `regal` method's whole schedule."""
    from regal.regal_method import search_params
    from regal.sim import DeviceSpec

    jobs = []
    indices = list(indices)
    for i in indices:
        graph = val[i]
        d = devices[i % len(devices)]
        action = policy.act(graph, DeviceSpec(d), mode="greedy", objective=objective)
        params = dict(search_params(action, seed_population, uniform_mutant_fraction),
                      polish_share=polish_share, race=race)
        for s in range(seeds):
            jobs.append((graph, d, 1000 + s, params, budget, objective, population_size))
    rewards = rollout_rewards(actors or Workers(1), cache or BaselineCache(), jobs)
    return np.asarray(rewards).reshape(len(indices), seeds)


def _scalar(tag: str, value: float) -> None:
    """A TensorBoard scalar written with core TF only (`tf.summary.scalar` needs the
    tensorboard package, which is not a dependency); TensorBoard's scalar plugin reads it."""
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(tag, tf.constant(float(value), tf.float32), metadata=metadata)


def _reinforce_step(policy, learner: Learner, train_set: GraphSource, config: TrainConfig,
                    rng: np.random.Generator, actors, cache: BaselineCache) -> tuple[dict, np.ndarray]:
    """Samples graphs, devices and K actions each (all from the loop's rng), gathers their
    rewards (S common seeds per action) and takes one REINFORCE step."""
    from regal.sim import DeviceSpec

    picks = rng.integers(train_set.count, size=config.graphs_per_step)
    devs = rng.choice(np.asarray(config.devices), size=config.graphs_per_step)
    episodes, jobs = [], []
    for index, d in zip(picks, devs):
        graph, d = train_set[int(index)], int(d)
        if config.augment:
            from regal.synth import augment
            graph = augment(graph, rng, config.augment)
        features = policy.features(graph, DeviceSpec(d), config.objective)
        actions = [policy.act(features, mode="sample", rng=rng) for _ in range(config.samples)]
        episodes.append(Episode(features, [a.choices for a in actions], None))
        for a in actions:
            params = config.rollout_params(a)
            jobs += [(graph, d, s, params, config.budget, config.objective,
                      config.population_size) for s in range(config.seeds_per_action)]
    rewards = np.asarray(rollout_rewards(actors, cache, jobs)).reshape(
        config.graphs_per_step, config.samples, config.seeds_per_action).mean(axis=2)
    for episode, r in zip(episodes, rewards):
        episode.rewards = r
    stats = learner.update(episodes)
    record = {"mode": "reinforce", "reward": float(rewards.mean()),
              "rewards": rewards.round(6).tolist(), "graphs": [int(i) for i in picks],
              "devices": [int(d) for d in devs], **stats}
    return record, rewards


def _start_from(policy, folder: Path) -> None:
    """`policy` given the weights stored in `folder` (a saved policy of the same shape and
    menus): a new run that fine-tunes it. ValueError naming the folder otherwise."""
    from regal.policy import Policy

    try:
        stored = Policy.load(folder)   # reads and checks the weights against its config
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"init_from: {folder} holds no readable policy ({exc})") from None
    for key in ("hidden", "num_layers", "menus", "learn", "learn_elite_bias"):
        theirs, mine = stored.config.get(key), policy.config.get(key)
        if json.loads(json.dumps(theirs)) != json.loads(json.dumps(mine)):
            raise ValueError(f"init_from: {folder} has {key} {theirs!r}, this run {mine!r}")
    policy.net.set_weights(stored.net.get_weights())


def train(config: TrainConfig, resume: bool = False, actors=None) -> dict:
    """Runs (or resumes) training until `config.steps`, `max_minutes` or a signal; checkpoints,
    exports the final policy to `RUN/policy/` and returns a summary (`signal`: the number of
    the signal that stopped it, else None). The run folder is locked before TensorFlow
    loads: a second run in it is refused at once (ValueError)."""
    run, config, lock = _prepare_run(config, resume)
    with lock:
        with regal.tfenv.quiet_native_logs():  # `regal train` hides absl's and CUDA's lines
            import tensorflow  # noqa: F401
        return _train_in(run, config, resume, actors)


def _train_in(run: Path, config: TrainConfig, resume: bool, actors) -> dict:
    """`train` in its prepared, locked run folder."""
    import tensorflow as tf
    from tqdm import tqdm

    from regal.policy import Policy

    train_set, val_set = graph_source(config.train), graph_source(config.val)
    cache = BaselineCache(run / BASELINES_FILE)
    policy = Policy(**config.policy_kwargs())
    if config.init_from and not resume:
        _start_from(policy, Path(config.init_from))
    policy.eager_max_ops = 0  # thousands of forward passes: trace once, always the same path
    learner = Learner(policy, config.learning_rate, config.entropy_coef, config.clip_norm)
    rng = np.random.default_rng(config.seed)
    step, wall_before = 0, 0.0
    if resume:
        meta, weights, opt_state = _read_checkpoint(run)
        policy.net.set_weights(weights)
        learner.set_state(opt_state)
        rng.bit_generator.state = meta["rng"]
        step, wall_before = int(meta["step"]), float(meta["wall_time"])
    _trim_history(run / HISTORY_FILE, step)
    targets = []
    if config.pretrain_steps > step:
        targets = supervised_targets(read_best_known(config.pretrain_from), train_set)

    own_actors = actors is None
    actors = actors or make_actors(config.workers, config.ray)
    writer = tf.summary.create_file_writer(str(run / "tb"))
    start = time.perf_counter()
    last_save = start
    stopped = "steps"
    last_val = None
    bar = tqdm(total=config.steps, initial=min(step, config.steps), unit="step", desc="train",
               disable=not config.progress)
    try:
        with StopFlag() as stop, JsonLinesWriter(run / HISTORY_FILE, _in_use(run)) as history:
            while step < config.steps:
                elapsed = wall_before + time.perf_counter() - start
                if stop.raised:
                    stopped = "signal"
                    break
                if config.max_minutes is not None and elapsed >= 60 * config.max_minutes:
                    stopped = "time"
                    break
                if step < config.pretrain_steps:
                    # -- supervised: best-known solutions' likelihood under the policy
                    picks = rng.integers(len(targets), size=config.graphs_per_step)
                    stats = learner.supervised_update([_target_tables(policy, *targets[int(i)])
                                                       for i in picks])
                    step += 1
                    record = {"step": step, "mode": "supervised",
                              "entries": [int(i) for i in picks], **stats}
                    rewards = None
                else:
                    record, rewards = _reinforce_step(policy, learner, train_set, config, rng,
                                                      actors, cache)
                    step += 1
                    record["step"] = step
                if config.val_every and step % config.val_every == 0:
                    last_val = _validate(policy, val_set, config, actors, cache)
                    record["val_improvement"] = last_val
                record["wall_time"] = wall_before + time.perf_counter() - start
                history.write(record)
                with writer.as_default(step=step):
                    if rewards is not None:
                        _scalar("reward/mean", record["reward"])
                        _scalar("policy/entropy_per_op", record["entropy_per_op"])
                    else:
                        _scalar("loss/supervised_nll_per_op", record["nll_per_op"])
                    _scalar("policy/grad_norm", record["grad_norm"])
                    _scalar("loss/total", record["loss"])
                    if "val_improvement" in record:
                        _scalar("val/improvement", record["val_improvement"])
                bar.update(1)
                shown = f"{record['reward']:+.4f}" if rewards is not None \
                    else f"nll {record['nll_per_op']:.3f}"
                bar.set_postfix(reward=shown,
                                val="-" if last_val is None else f"{last_val:+.4f}",
                                refresh=False)
                if time.perf_counter() - last_save >= 60 * config.checkpoint_minutes:
                    save_checkpoint(run, policy, learner, rng, step,
                                    wall_before + time.perf_counter() - start, cache)
                    last_save = time.perf_counter()
            wall = wall_before + time.perf_counter() - start
            save_checkpoint(run, policy, learner, rng, step, wall, cache)
            policy.save(run / "policy")
    finally:
        bar.close()
        writer.close()
        if own_actors:
            actors.close()
    return {"run": str(run), "step": step, "stopped": stopped, "wall_time": wall,
            "val_improvement": last_val, "policy": str(run / "policy"), "signal": stop.signum}

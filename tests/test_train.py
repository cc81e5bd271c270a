"""REINFORCE training and the `regal` method: a toy bandit is learned, a resumed run equals an
uninterrupted one, SIGTERM checkpoints, a uniform-only policy is plain BRKGA, and the actor
side never imports TensorFlow. Tiny networks, graphs and budgets keep this file fast."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow loads: Keras 2 (tf-keras)

import numpy as np
import pytest

from regal.optimizers import Problem, solve, solve_brkga
from regal.sim import DeviceSpec
from regal.synth import random_dag
from regal.train import (BaselineCache, InlineActors, RolloutTask, TrainConfig, advantages,
                         rollout_rewards, run_rollout)

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf_keras")
from regal.policy import HEADS, Policy  # noqa: E402
from regal.regal_method import ablated_action, solve_regal  # noqa: E402
from regal.train import Episode, Learner, train  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def small_graph(n=30, seed=1):
    return random_dag(n, seed)


# ---------------------------------------------------------------------------
# learner


def test_advantages_use_a_per_graph_mean_baseline():
    adv = advantages([np.array([1.0, 3.0]), np.array([10.0, 10.0, 13.0, 7.0])])
    centred = np.concatenate([[-1.0, 1.0], [0.0, 0.0, 3.0, -3.0]])
    np.testing.assert_allclose(np.concatenate(adv), centred / centred.std(), rtol=1e-7)


def test_reinforce_learns_a_toy_bandit():
    """Reward = share of ops whose priority head picks menu entry 3: its probability must rise."""
    graph = small_graph(12)
    policy = Policy(num_layers=1, hidden=8, learn=("priority",), learn_elite_bias=False, seed=0)
    learner = Learner(policy, learning_rate=0.05, entropy_coef=0.0, clip_norm=10.0)
    features = policy.features(graph, 2)
    col = HEADS.index("priority")

    def prob_good():
        logits = policy.logits(features)["priority"]
        p = np.exp(logits - logits.max(1, keepdims=True))
        return float((p[:, 3] / p.sum(1)).mean())

    rng = np.random.default_rng(0)
    before = prob_good()
    for _ in range(25):
        actions = [policy.act(features, mode="sample", rng=rng) for _ in range(8)]
        rewards = np.array([(a.indices[:, col] == 3).mean() for a in actions])
        learner.update([Episode(features, [a.indices for a in actions], rewards)])
    after = prob_good()
    assert before < 0.25
    assert after > 0.6, (before, after)


# ---------------------------------------------------------------------------
# actors and rewards


def test_uniform_rollout_has_zero_reward_with_common_random_numbers():
    graph = small_graph()
    cache = BaselineCache()
    job = (graph, 2, 5, {}, 60, "peak_memory", 10)
    assert rollout_rewards(InlineActors(), cache, [job, job]) == [0.0, 0.0]
    assert len(cache.values) == 1  # one baseline for both (same graph, devices, seed, budget)
    problem = Problem(graph, DeviceSpec(2))
    expected = solve_brkga(problem, 60, 5, population_size=10).value
    assert list(cache.values.values()) == [expected]


def test_validation_of_a_uniform_policy_is_zero_and_matches_plain_brkga():
    from regal.train import graph_source, validation_rewards

    val = graph_source("valid:3")
    policy = Policy(num_layers=1, hidden=8, menus={"beta": [(1.0, 1.0)], "elite_bias": [0.7]})
    cache = BaselineCache()
    rewards = validation_rewards(policy, val, [1, 2], devices=(2, 3), seeds=2, budget=40,
                                 cache=cache, population_size=10)
    assert rewards.shape == (2, 2) and not rewards.any()
    # graph i runs on devices[i % 2] with seeds 1000, 1001: graph 1 on 3 devices
    expected = solve_brkga(Problem(val[1], DeviceSpec(3)), 40, 1001, population_size=10).value
    assert cache.values[BaselineCache.key(val[1], 3, 1001, 40, "peak_memory", 10)] == expected


def test_actor_side_does_not_import_tensorflow():
    code = (
        "import sys, numpy as np\n"
        "from regal.train import RolloutTask, run_rollout\n"
        "from regal.synth import random_dag\n"
        "g = random_dag(30, 1)\n"
        "genes = 30 * 4\n"
        "p = {'alpha': np.full(genes, 2.0), 'beta': np.full(genes, 5.0), 'elite_bias': 0.8}\n"
        "print(run_rollout(RolloutTask(g, 2, 60, 3, population_size=10, params=p)))\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    genes = 30 * 4
    params = {"alpha": np.full(genes, 2.0), "beta": np.full(genes, 5.0), "elite_bias": 0.8}
    here = run_rollout(RolloutTask(small_graph(), 2, 60, 3, population_size=10, params=params))
    assert float(out.stdout.strip().splitlines()[-1]) == here


# ---------------------------------------------------------------------------
# the regal method


def test_uniform_only_menu_reproduces_plain_brkga_exactly():
    graph = small_graph(40, seed=7)
    problem = Problem(graph, DeviceSpec(3))
    policy = Policy(num_layers=1, hidden=8, menus={"beta": [(1.0, 1.0)], "elite_bias": [0.7]})
    plain = solve_brkga(problem, 300, 11)
    mine = solve_regal(problem, 300, 11, policy=policy)
    np.testing.assert_array_equal(mine.placement, plain.placement)
    np.testing.assert_array_equal(mine.priority, plain.priority)
    np.testing.assert_array_equal(mine.transfer_priority, plain.transfer_priority)
    assert mine.value == plain.value and mine.evaluations == plain.evaluations
    assert mine.extra["history"] == plain.extra["history"]
    assert mine.extra["policy_time"] > 0 and mine.extra["brkga_time"] > 0
    via_registry = solve("regal", problem, 300, 11, policy=policy)
    assert via_registry.value == plain.value


def test_policy_dir_is_stored_portably_and_pinned_by_content_hash(tmp_path, monkeypatch):
    from regal import regal_method

    policy = Policy(num_layers=1, hidden=8, seed=2)
    inside = tmp_path / "repo" / "runs" / "p"
    policy.save(inside)
    monkeypatch.setattr(regal_method, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.chdir(tmp_path)  # a relative path is found under the repo root, not the cwd
    assert regal_method.portable_policy_dir(inside) == "runs/p"
    assert regal_method.portable_policy_dir(tmp_path / "elsewhere") == str(tmp_path / "elsewhere")
    assert regal_method.resolve_policy_dir("runs/p") == tmp_path / "repo" / "runs" / "p"
    digest = regal_method.policy_content_hash("runs/p")
    assert digest == regal_method.policy_content_hash(inside) and len(digest) == 16
    problem = Problem(small_graph(20), DeviceSpec(2))
    solved = solve_regal(problem, 200, 1, policy_dir="runs/p", policy_hash=digest)
    assert solved.value == solve_regal(problem, 200, 1, policy=policy).value
    Policy(num_layers=1, hidden=8, seed=3).save(tmp_path / "other")
    assert regal_method.policy_content_hash(tmp_path / "other") != digest
    with pytest.raises(ValueError, match="policy_hash"):
        solve_regal(problem, 200, 1, policy_dir="runs/p", policy_hash="0" * 16)


def test_ablation_switches_heads_back_to_plain_brkga_choices():
    graph = small_graph(20)
    policy = Policy(num_layers=1, hidden=8, seed=3)
    action = policy.act(graph, 2, mode="sample", seed=0)
    sched = ablated_action(policy, action, learn="scheduling", learn_elite_bias=False)
    for i, head in enumerate(HEADS):
        if head in ("priority", "transfer"):
            np.testing.assert_array_equal(sched.indices[:, i], action.indices[:, i])
        else:
            assert (sched.indices[:, i] == policy.default_index[i]).all()
    n = graph.num_nodes
    assert (sched.alpha[:2 * n] == 1.0).all() and (sched.elite_bias == 0.7).all()


# ---------------------------------------------------------------------------
# the loop: resume and signals


def tiny_config(out, steps):
    return TrainConfig(train="train:20", val="valid:2", out=str(out), steps=steps, budget=40,
                       devices=(2, 3), graphs_per_step=2, samples=2, population_size=10,
                       val_every=2, val_graphs=2, val_seeds=1, workers=1, hidden=8,
                       num_layers=1, learning_rate=0.01, progress=False)


def _history(run):
    return [json.loads(line) for line in (Path(run) / "history.jsonl").read_text().splitlines()]


def _checkpoint(run):
    with np.load(Path(run) / "checkpoint.npz") as data:
        return {k: data[k] for k in data.files}


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path):
    straight = train(tiny_config(tmp_path / "a", 4))
    assert straight["step"] == 4
    first = train(tiny_config(tmp_path / "b", 2))
    assert first["step"] == 2
    with pytest.raises(ValueError, match="--resume"):
        train(tiny_config(tmp_path / "b", 4))
    resumed = train(tiny_config(tmp_path / "b", 4), resume=True)
    assert resumed["step"] == 4

    a, b = _history(tmp_path / "a"), _history(tmp_path / "b")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for key in ("rewards", "graphs", "devices", "val_improvement", "loss"):
        assert [r.get(key) for r in a] == [r.get(key) for r in b], key
    ca, cb = _checkpoint(tmp_path / "a"), _checkpoint(tmp_path / "b")
    assert ca.keys() == cb.keys()
    for key in ca:
        if key != "meta":
            np.testing.assert_array_equal(ca[key], cb[key], err_msg=key)
    meta_a, meta_b = json.loads(str(ca["meta"])), json.loads(str(cb["meta"]))
    assert meta_a["rng"] == meta_b["rng"] and meta_a["step"] == meta_b["step"] == 4
    # the cached uniform baselines survive the resume
    assert json.loads((tmp_path / "b" / "baselines.json").read_text())


def test_sigterm_checkpoints_and_stops(tmp_path):
    """SIGTERM mid-run (sent once the first step is logged): the loop finishes its step,
    checkpoints it and exports the policy, instead of dying."""
    import threading

    run = tmp_path / "sig"
    config = tiny_config(run, 100000)
    config.val_every = 0
    history = run / "history.jsonl"

    def send_when_a_step_is_logged():
        deadline = time.time() + 120
        while time.time() < deadline and not (history.exists() and history.read_text()):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    sender = threading.Thread(target=send_when_a_step_is_logged, daemon=True)
    sender.start()
    summary = train(config)
    sender.join()
    assert summary["stopped"] == "signal"
    meta = json.loads(str(_checkpoint(run)["meta"]))
    assert meta["step"] == summary["step"] == len(_history(run)) >= 1
    assert (run / "policy" / "weights.npz").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the run restores the handler

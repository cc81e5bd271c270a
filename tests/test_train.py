"""Training and the `regal` method: a toy bandit is learned, supervised steps raise a target's
likelihood, a resumed run equals an uninterrupted one (REINFORCE and pretraining), SIGTERM
checkpoints, a uniform-only policy is plain BRKGA, and the actor side never imports TensorFlow.
Tiny networks, graphs and budgets keep this file fast."""

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
from regal.train import (BaselineCache, RolloutTask, TrainConfig, advantages, rollout_rewards,
                         run_rollout)
from regal.workers import Workers

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf_keras")
from regal.policy import Policy  # noqa: E402
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
    policy = Policy(num_layers=1, hidden=8, learn=("priority",), learn_elite_bias=False, seed=0,
                    prior_logit=0.0)
    learner = Learner(policy, learning_rate=0.05, entropy_coef=0.0, clip_norm=10.0)
    features = policy.features(graph, 2)

    def prob_good():
        logits = policy.logits(features)["priority"]
        p = np.exp(logits - logits.max(1, keepdims=True))
        return float((p[:, 3] / p.sum(1)).mean())

    rng = np.random.default_rng(0)
    before = prob_good()
    for _ in range(25):
        actions = [policy.act(features, mode="sample", rng=rng) for _ in range(8)]
        rewards = np.array([(a.choices.priority == 3).mean() for a in actions])
        learner.update([Episode(features, [a.choices for a in actions], rewards)])
    after = prob_good()
    assert before < 0.25
    assert after > 0.6, (before, after)


def test_supervised_steps_raise_the_likelihood_of_a_target():
    """Target = the reference solution itself: its negative log-likelihood falls, and the
    policy comes to prefer following the reference placement and order."""
    from regal.policy.menus import target_log_likelihoods
    from regal.policy.losses import supervised_loss

    graph = small_graph(40)
    policy = Policy(num_layers=1, hidden=8, seed=1, prior_logit=0.0)
    learner = Learner(policy, learning_rate=0.05, entropy_coef=0.0, clip_norm=10.0)
    features = policy.features(graph, 3)
    ref = features.reference
    tables = target_log_likelihoods(policy.menus, ref, np.zeros(graph.num_nodes, np.int64),
                                    ref.priority, ref.transfer)
    tables = {h: t for h, t in tables.items() if h in policy.learned}

    def nll():
        return float(supervised_loss(policy.outputs(features), tables)) / graph.num_nodes

    before = nll()
    for _ in range(30):
        stats = learner.supervised_update([(features, tables)])
    assert stats["nll_per_op"] == pytest.approx(nll(), rel=0.2)
    assert nll() < before - 0.5, (before, nll())
    action = policy.act(features, mode="greedy")
    assert (action.choices.affinity == 3).mean() > 0.9   # follow_strongly
    assert (action.choices.priority == 3).mean() > 0.9   # kappa 100


# ---------------------------------------------------------------------------
# actors and rewards


def test_uniform_rollout_has_zero_reward_with_common_random_numbers():
    graph = small_graph()
    cache = BaselineCache()
    job = (graph, 2, 5, {}, 60, "peak_memory", 10)
    assert rollout_rewards(Workers(1), cache, [job, job]) == [0.0, 0.0]
    assert len(cache.values) == 1  # one baseline for both (same graph, devices, seed, budget)
    problem = Problem(graph, DeviceSpec(2))
    expected = solve_brkga(problem, 60, 5, population_size=10).value
    assert list(cache.values.values()) == [expected]


def test_validation_of_a_uniform_policy_is_seeded_brkga_against_plain_brkga():
    from regal.train import graph_source, validation_rewards

    val = graph_source("valid:3")
    policy = Policy(num_layers=1, hidden=8, menus=UNIFORM_ONLY)
    cache = BaselineCache()
    rewards = validation_rewards(policy, val, [1, 2], devices=(2, 3), seeds=2, budget=40,
                                 cache=cache, population_size=10, seed_population=False)
    assert rewards.shape == (2, 2)
    # a uniform action without seeding is plain BRKGA at the budget left by the reference
    for row, i, d in ((0, 1, 3), (1, 2, 2)):
        for s in range(2):
            base = cache.values[BaselineCache.key(val[i], d, 1000 + s, 40, "peak_memory", 10)]
            mine = solve_brkga(Problem(val[i], DeviceSpec(d)), 36, 1000 + s,
                               population_size=10).value
            assert rewards[row, s] == pytest.approx((base - mine) / base)
    # graph i runs on devices[i % 2] with seeds 1000, 1001: graph 1 on 3 devices
    expected = solve_brkga(Problem(val[1], DeviceSpec(3)), 40, 1001, population_size=10).value
    assert cache.values[BaselineCache.key(val[1], 3, 1001, 40, "peak_memory", 10)] == expected


def test_a_rollout_with_a_polish_share_runs_as_the_regal_method_does():
    """BRKGA on its share, then local search: the seeded-brkga baseline's two phases."""
    from regal.policy.reference import reference_for
    from regal.train import run_rollout

    graph = small_graph(40, seed=4)
    problem = Problem(graph, DeviceSpec(3))
    reference = reference_for(graph, DeviceSpec(3))
    params = {"initial": reference.seeds, "spent": reference.evaluations, "polish_share": 0.4}
    value = run_rollout(RolloutTask(graph, 3, 1000, 3, params=params))
    # the rollout has no fresh climb from the heuristic starts (it ignores the policy)
    assert value == solve("seeded-brkga", problem, 1000, 3, polish_share=0.4,
                          fresh_climbs=0).value
    brkga_only = dict(params, polish_share=0.0)
    assert run_rollout(RolloutTask(graph, 3, 1000, 3, params=brkga_only)) == \
        solve("seeded-brkga", problem, 1000, 3, polish_share=0.0).value
    for bad in (1.0, -0.2, True, "0.5"):
        with pytest.raises(ValueError, match="polish_share"):
            TrainConfig(train="train:2", val="valid:2", out="x", polish_share=bad)


def test_a_rollout_with_race_runs_the_regal_methods_whole_schedule():
    """`race`: BRKGA on its tenth, then the climb from its best raced against the fresh
    climbs, as `seeded-brkga` runs with its default schedule (the reward is that value)."""
    from regal.policy.reference import reference_for
    from regal.train import run_rollout

    graph = small_graph(40, seed=4)
    problem = Problem(graph, DeviceSpec(3))
    reference = reference_for(graph, DeviceSpec(3))
    params = {"initial": reference.seeds, "spent": reference.evaluations, "race": True}
    value = run_rollout(RolloutTask(graph, 3, 1000, 3, params=params))
    assert value == solve("seeded-brkga", problem, 1000, 3).value
    assert value != solve("seeded-brkga", problem, 1000, 3, fresh_climbs=0, race=()).value
    config = TrainConfig(train="train:2", val="valid:2", out="x", race=True)
    assert config.rollout_params(Policy(num_layers=1, hidden=8, seed=3).act(
        graph, DeviceSpec(3), mode="greedy"))["race"] is True
    with pytest.raises(ValueError, match="polish_share"):
        TrainConfig(train="train:2", val="valid:2", out="x", race=True, polish_share=0.5)
    with pytest.raises(ValueError, match="race"):
        TrainConfig(train="train:2", val="valid:2", out="x", race="yes")


def test_training_with_the_polish_logs_it_and_a_run_without_it_cannot_resume_with_it(tmp_path):
    result = train(tiny_config(tmp_path / "p", 2, polish_share=0.5))
    assert result["step"] == 2
    stored = json.loads((tmp_path / "p" / "train_config.json").read_text())
    assert stored["polish_share"] == 0.5
    # same graphs, actions and seeds as a run without it (the loop's rng draws the same):
    # only the rollouts' answers, hence the rewards, differ
    train(tiny_config(tmp_path / "q", 2))
    polished, plain = _history(tmp_path / "p")[0], _history(tmp_path / "q")[0]
    assert polished["graphs"] == plain["graphs"] and polished["rewards"] != plain["rewards"]
    # a run stored before the setting existed ran without the polish: resuming it with one
    # would change its reward mid-run
    train(tiny_config(tmp_path / "old", 1))
    config_file = tmp_path / "old" / "train_config.json"
    old = json.loads(config_file.read_text())
    del old["polish_share"]
    config_file.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="polish_share"):
        train(tiny_config(tmp_path / "old", 2, polish_share=0.5), resume=True)
    assert train(tiny_config(tmp_path / "old", 2), resume=True)["step"] == 2


def test_a_new_run_can_start_from_a_stored_policy(tmp_path):
    from regal.train import _start_from

    source = Policy(num_layers=1, hidden=8, seed=3)
    source.save(tmp_path / "source")
    mine = Policy(num_layers=1, hidden=8, seed=4)
    assert any((a != b).any() for a, b in zip(mine.net.get_weights(), source.net.get_weights()))
    _start_from(mine, tmp_path / "source")
    for a, b in zip(mine.net.get_weights(), source.net.get_weights()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="init_from.*hidden"):
        _start_from(Policy(num_layers=1, hidden=16), tmp_path / "source")
    with pytest.raises(ValueError, match="init_from"):
        _start_from(mine, tmp_path / "nothing")
    # a run started from its own initial weights is the plain run; from others, it is not
    plain = tiny_config(tmp_path / "plain", 1)
    Policy(**plain.policy_kwargs()).save(tmp_path / "own")
    train(plain)
    train(tiny_config(tmp_path / "own_run", 1, init_from=str(tmp_path / "own")))
    train(tiny_config(tmp_path / "other_run", 1, init_from=str(tmp_path / "source")))
    first = {name: _history(tmp_path / name)[0]["rewards"]
             for name in ("plain", "own_run", "other_run")}
    assert first["own_run"] == first["plain"] != first["other_run"]


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


UNIFORM_ONLY = {"affinity": [["uniform", [1, 1], [1, 1], [1, 1], [1, 1]]], "priority": [0.0],
                "transfer": [0.0], "elite_bias": [0.7]}


def test_uniform_only_menu_reproduces_plain_brkga_exactly():
    """Unseeded, a uniform-only policy is plain BRKGA at the budget the reference's four
    evaluations leave; seeded and without the learned move ranker (every learned choice at
    its neutral default), it is the seeded-brkga baseline: the no-policy twin."""
    graph = small_graph(40, seed=7)
    problem = Problem(graph, DeviceSpec(3))
    policy = Policy(num_layers=1, hidden=8, menus=UNIFORM_ONLY)
    plain = solve_brkga(problem, 296, 11)
    mine = solve_regal(problem, 300, 11, policy=policy, seed_population=False, polish_share=0)
    np.testing.assert_array_equal(mine.placement, plain.placement)
    np.testing.assert_array_equal(mine.priority, plain.priority)
    np.testing.assert_array_equal(mine.transfer_priority, plain.transfer_priority)
    assert mine.value == plain.value and mine.evaluations == 300 == plain.evaluations + 4
    assert mine.extra["history"] == plain.extra["history"]
    assert mine.extra["policy_time"] > 0 and mine.extra["brkga_time"] > 0
    via_registry = solve("regal", problem, 300, 11, policy=policy, seed_population=False,
                         polish_share=0)
    assert via_registry.value == plain.value
    seeded = solve_regal(problem, 300, 11, policy=policy, move_ranker="none")
    twin = solve("seeded-brkga", problem, 300, 11)
    assert seeded.value == twin.value
    np.testing.assert_array_equal(seeded.placement, twin.placement)
    np.testing.assert_array_equal(seeded.priority, twin.priority)


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
    for head in action.choices._fields:
        if head in ("priority", "transfer"):
            np.testing.assert_array_equal(getattr(sched.choices, head),
                                          getattr(action.choices, head))
        else:
            assert (getattr(sched.choices, head) == getattr(policy.default, head)).all()
    assert sched.placement_is_uniform() and (sched.keys.elite_bias == 0.7).all()


# ---------------------------------------------------------------------------
# the loop: resume and signals


def tiny_config(out, steps, **more):
    return TrainConfig(train="train:20", val="valid:2", out=str(out), steps=steps, budget=40,
                       devices=(2, 3), graphs_per_step=2, samples=2, population_size=10,
                       val_every=2, val_graphs=2, val_seeds=1, workers=1, hidden=8,
                       num_layers=1, learning_rate=0.01, progress=False, **more)


def tiny_store(path):
    """A best-known store (regal.bestknown's line format) for three graphs of train:20."""
    from regal.optimizers import round_robin
    from regal.train import graph_source

    source = graph_source("train:20")
    lines = []
    for i, d in ((0, 2), (1, 2), (2, 3)):
        graph = source[i]
        found = round_robin(Problem(graph, DeviceSpec(d)))
        lines.append(json.dumps({
            "kind": "solution", "fingerprint": graph.fingerprint(), "devices": d,
            "memory_limit": None, "objective": "peak_memory", "value": found.value,
            "placement": found.placement.tolist(), "priority": found.priority.tolist(),
            "transfer_priority": found.transfer_priority.tolist()}))
    lines.append(json.dumps({"kind": "effort", "fingerprint": "x", "seconds": 3.0}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


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


def test_pretraining_then_reinforce_resumes_exactly(tmp_path):
    store = tiny_store(tmp_path / "store.jsonl")
    more = dict(pretrain_from=store, pretrain_steps=2, seeds_per_action=2)
    train(tiny_config(tmp_path / "a", 4, **more))
    train(tiny_config(tmp_path / "b", 1, **more))
    train(tiny_config(tmp_path / "b", 4, **more), resume=True)
    a, b = _history(tmp_path / "a"), _history(tmp_path / "b")
    assert [r["mode"] for r in a] == ["supervised", "supervised", "reinforce", "reinforce"]
    for key in ("entries", "rewards", "graphs", "loss", "val_improvement"):
        assert [r.get(key) for r in a] == [r.get(key) for r in b], key
    assert all(np.isfinite(r["nll_per_op"]) for r in a[:2])  # densities: may be < 0
    with pytest.raises(ValueError, match="pretrain_from"):
        TrainConfig(train="train", val="valid", out="x", pretrain_steps=3)


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
    assert summary["stopped"] == "signal" and summary["signal"] == signal.SIGTERM  # exit 143
    meta = json.loads(str(_checkpoint(run)["meta"]))
    assert meta["step"] == summary["step"] == len(_history(run)) >= 1
    assert (run / "policy" / "weights.npz").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the run restores the handler


# ---------------------------------------------------------------------------
# issue 24 item 7: a resumed run's history, and item 5: the library checks the config


def test_resume_trim_keeps_every_valid_step_past_garbage_lines(tmp_path, capsys):
    from regal.train import _trim_history

    path = tmp_path / "history.jsonl"
    lines = [json.dumps({"step": s, "loss": s / 10}).encode() for s in range(1, 31)]
    garbage = [b"{torn", b"42", b"[]", b"null", b'{"step": "7"}', b'{"step": true}',
               b"\xff\xfe", b"[" * 100_000, b'{"no_step": 1}']
    mixed = lines[:5] + garbage[:4] + lines[5:20] + garbage[4:] + lines[20:]
    path.write_bytes(b"\n".join(mixed) + b"\n")
    _trim_history(path, 30)  # before: steps 6..30 were dropped after the first garbage line
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == \
        list(range(1, 31))
    assert f"{path}: skipped {len(garbage)} line(s)" in capsys.readouterr().err
    _trim_history(path, 12)  # the steps after the checkpoint go, as before
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == \
        list(range(1, 13))


@pytest.mark.parametrize("field,value", [
    ("learning_rate", float("nan")), ("learning_rate", 0.0), ("learning_rate", float("inf")),
    ("entropy_coef", -1.0), ("entropy_coef", float("nan")), ("clip_norm", 0.0),
    ("checkpoint_minutes", float("nan")), ("max_minutes", float("inf")),
    ("prior_logit", float("nan")), ("population_size", 0), ("hidden", 0),
])
def test_config_refuses_non_finite_or_out_of_range_numbers(field, value):
    with pytest.raises(ValueError, match=rf"^{field}: expected"):
        TrainConfig(train="train", val="valid", out="x", budget=1000, **{field: value})


def test_augmented_graphs_resume_exactly(tmp_path, monkeypatch):
    """--augment jitters each REINFORCE graph (new costs and sizes, so a new fingerprint),
    drawn from the loop's rng: a stopped and resumed run repeats the uninterrupted one."""
    import regal.synth

    seen = []
    real_augment = regal.synth.augment

    def spy(graph, rng, scale):
        out = real_augment(graph, rng, scale)
        seen.append((graph.fingerprint(), out.fingerprint(), scale))
        return out

    monkeypatch.setattr(regal.synth, "augment", spy)
    train(tiny_config(tmp_path / "a", 2, augment=0.3))
    assert len(seen) == 2 * 2 and all(s == 0.3 and a != b for a, b, s in seen)
    train(tiny_config(tmp_path / "b", 1, augment=0.3))
    train(tiny_config(tmp_path / "b", 2, augment=0.3), resume=True)
    a, b = _history(tmp_path / "a"), _history(tmp_path / "b")
    assert [r["rewards"] for r in a] == [r["rewards"] for r in b]
    assert seen[4:6] == seen[0:2] and seen[6:8] == seen[2:4]  # the same jittered graphs
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="augment"):
            tiny_config(tmp_path / "d", 1, augment=bad)


# ---------------------------------------------------------------------------
# the best-known reader (pretraining's targets)


def test_read_best_known_keeps_the_best_and_skips_other_lines(tmp_path):
    from regal.train import read_best_known

    line = {"kind": "solution", "fingerprint": "abc", "devices": 2, "memory_limit": None,
            "objective": "peak_memory", "value": 10.0, "placement": [0, 1, 1],
            "priority": [2, 1, 0], "transfer_priority": [0, 1, 2]}
    path = tmp_path / "store.jsonl"
    path.write_text("\n".join([
        json.dumps(line), json.dumps({**line, "value": 7.0, "placement": [1, 1, 0]}),
        json.dumps({**line, "value": 9.0}), json.dumps({"kind": "effort", "fingerprint": "abc"}),
        json.dumps({**line, "devices": 4, "value": 3.0}), '{"kind": "solution", "finger']) + "\n")
    entries = sorted(read_best_known(path), key=lambda e: e.devices)
    assert [(e.devices, e.value) for e in entries] == [(2, 7.0), (4, 3.0)]
    assert entries[0].placement.tolist() == [1, 1, 0]
    with pytest.raises(ValueError, match="no best-known"):
        (tmp_path / "empty.jsonl").write_text("")
        read_best_known(tmp_path / "empty.jsonl")
    # several stores, comma-separated: the best per key over all of them
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**line, "value": 5.0, "placement": [0, 0, 1]}) + "\n")
    merged = sorted(read_best_known(f"{path},{other}"), key=lambda e: e.devices)
    assert [(e.devices, e.value) for e in merged] == [(2, 5.0), (4, 3.0)]
    assert merged[0].placement.tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="missing.jsonl"):
        read_best_known(f"{path},{tmp_path / 'missing.jsonl'}")

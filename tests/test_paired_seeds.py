"""experiments/paired_seeds.py: two methods' no_harm caches compared, checked by hand."""

from __future__ import annotations

import json

import pytest
from helpers import experiment

paired = experiment("paired_seeds")


def write(path, method, runs):
    path.write_text("".join(json.dumps({"key": ["fp-" + g, g, "synth", 2], "seed": s,
                                        "method": method, "budget": 5000, "brkga": b,
                                        "value": v}) + "\n" for g, s, b, v in runs))
    return path


def test_two_caches_compared_by_hand(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", "regal", [
        ("g1", 0, 100.0, 90.0), ("g1", 1, 100.0, 96.0), ("g1", 2, 100.0, 50.0),
        ("g2", 0, 200.0, 190.0), ("g2", 1, 200.0, 190.0)])
    b = write(tmp_path / "b.jsonl", "seeded-brkga", [
        ("g1", 0, 100.0, 95.0), ("g1", 1, 100.0, 95.0),
        ("g1", 2, 101.0, 99.0),            # another BRKGA run for seed 2: the seed is left out
        ("g2", 0, 200.0, 180.0), ("g2", 1, 200.0, 184.0)])
    rows = paired.compare(paired.read_cache(a)[1], paired.read_cache(b)[1])
    assert len(rows) == 1
    r = rows[0]
    # g1: regal (100 - 93) / 100 = 7%, seeded 5%; g2: regal 5%, seeded (200 - 182) / 200 = 9%
    assert (r["graphs"], r["seeds"]) == (2, 2)
    assert r["mean_a"] == pytest.approx(6.0) and r["mean_b"] == pytest.approx(7.0)
    assert r["diff"] == pytest.approx(-1.0) and r["se"] == pytest.approx(3.0)
    assert (r["a_ahead"], r["b_ahead"]) == (1, 1)
    assert paired.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "| synth | 2 | 2 | 2 | +6.00% / +6.00% | +7.00% / +7.00% | -1.00 (3.00) | 1 / 1 |" in out


def test_a_cache_of_two_methods_or_budgets_is_refused(tmp_path, capsys):
    for field, other, what in (("method", "brkga", "one method"), ("budget", 500, "one budget")):
        mixed = tmp_path / f"mixed_{field}.jsonl"
        write(mixed, "regal", [("g1", 0, 100.0, 90.0)])
        line = {"key": ["fp-g2", "g2", "synth", 2], "seed": 0, "method": "regal",
                "budget": 5000, "brkga": 1.0, "value": 1.0}
        with mixed.open("a") as fh:
            fh.write(json.dumps(dict(line, **{field: other})) + "\n")
        with pytest.raises(ValueError, match=what):
            paired.read_cache(mixed)
        # the command line says so and exits 2
        assert paired.main([str(mixed), str(mixed)]) == 2
        assert what in capsys.readouterr().err

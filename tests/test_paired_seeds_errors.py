"""experiments/paired_seeds.py: it reads the caches no_harm.py writes today (5-part keys,
with the memory limit) and the older ones (4-part keys); a mistake is one error line, exit
code 2."""

from __future__ import annotations

import json

import pytest
from helpers import experiment

paired = experiment("paired_seeds")


def _line(graph, seed, brkga, value, limit=None, parts=5, **more):
    key = ["fp-" + graph, graph, "synth", 2, limit][:parts]
    return json.dumps({"key": key, "seed": seed, "method": "regal", "against": "seeded-brkga",
                       "budget": 5000, "revisions": ["r", ""], "brkga": brkga, "value": value,
                       **more}) + "\n"


def test_reads_todays_five_part_keys_and_the_old_four_part_ones(tmp_path, capsys):
    """Audit A4: a cache of today's no_harm.py against itself, and against an old one."""
    today = tmp_path / "today.jsonl"
    today.write_text(_line("g1", 0, 100.0, 90.0) + _line("g1", 1, 100.0, 96.0))
    old = tmp_path / "old.jsonl"
    old.write_text(_line("g1", 0, 100.0, 95.0, parts=4) + _line("g1", 1, 100.0, 95.0, parts=4))
    method, runs = paired.read_cache(today)
    assert method == "regal" and runs == {("synth", 2, "g1", "fp-g1", None):
                                          {0: (100.0, 90.0), 1: (100.0, 96.0)}}
    assert paired.read_cache(old)[1] == {("synth", 2, "g1", "fp-g1", None):
                                         {0: (100.0, 95.0), 1: (100.0, 95.0)}}
    assert paired.main([str(today), str(old)]) == 0
    # g1: (100 - 93) / 100 = 7% against 5%
    assert "| synth | 2 | 1 | 2 | +7.00% / +7.00% | +5.00% / +5.00% | +2.00 (nan) |" in \
        capsys.readouterr().out


def test_runs_under_other_memory_limits_are_not_paired(tmp_path, capsys):
    a = tmp_path / "a.jsonl"
    a.write_text(_line("g1", 0, 100.0, 90.0, limit=1000))
    b = tmp_path / "b.jsonl"
    b.write_text(_line("g1", 0, 100.0, 90.0, limit=2000))
    assert paired.main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "share no graph" in err and "Traceback" not in err


def test_a_torn_last_line_is_left_out(tmp_path, capsys):
    cache = tmp_path / "c.jsonl"
    cache.write_text(_line("g1", 0, 100.0, 90.0) + '{"key": ["ab')
    assert paired.read_cache(cache)[1] == {("synth", 2, "g1", "fp-g1", None): {0: (100.0, 90.0)}}
    assert paired.main([str(cache), str(cache)]) == 0


@pytest.mark.parametrize("text, needle", [
    (json.dumps({"key": ["fp", "g", "synth", 2, None, "x"], "seed": 0, "method": "regal",
                 "budget": 5000, "brkga": 1.0, "value": 1.0}) + "\n", "a key of 6 values"),
    ("not json\n", "not a no_harm.py cache line"),
    (_line("g1", 0, 1.0, 1.0) + _line("g2", 0, 1.0, 1.0, against="brkga"), "against one"),
])
def test_a_file_that_is_no_cache_is_refused(tmp_path, capsys, text, needle):
    cache = tmp_path / "c.jsonl"
    cache.write_text(text)
    assert paired.main([str(cache), str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and needle in err and "Traceback" not in err


def test_a_missing_cache_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        paired.main([str(tmp_path / "none.jsonl"), str(tmp_path / "none.jsonl")])
    assert exc.value.code == 2 and "none.jsonl" in capsys.readouterr().err

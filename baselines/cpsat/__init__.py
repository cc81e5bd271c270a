"""CP-SAT baseline: an exact constraint model of placement, per-device order and memory,
hinted with the best cheap heuristic.

Why: on small graphs it gives proven optima and lower bounds (a yardstick for every
heuristic); on larger ones it is the "exact solver under a time limit" baseline of the REGAL
paper. Its answer is never worse than the hint, because both are re-scored by the simulator
and the better one is returned.

Modules, one job each:

- `method`: `solve`, the `cpsat` method: the hint, the model, the better answer of the two
  by the simulator, and what `Solution.extra` records;
- `model`: what the model means (its constraints, and its objective against the
  simulator's), and what both formulations share: the handles, memory units and ticks,
  placement variables;
- `cumulative`: the cumulative formulation (`build_model`): larger graphs, per-device
  limits and the makespan mode; with `timed=True` the timed formulation;
- `timed`: what makes a cumulative model timed: the simulator's exact durations in ticks
  (`exact_ticks`) and its eager starts (`add_eager_starts`), so that devices run in
  parallel and never idle while work is ready (small graphs, peak memory);
- `sequence`: the sequence formulation of the peak-memory model (`build_sequence_model`):
  small graphs;
- `hint`: the hint: the best cheap heuristic, and its simulated schedule turned into a
  complete model assignment;
- `run`: the time a call gets, and one model run within it (build, hint, solve between a
  deterministic limit and a wall-clock deadline, read the schedule back);
- `bounds`: lower bounds on the simulated peak memory (`closed_form_bound`, `lower_bound`);
- `lns`: the `cpsat-lns` method, large-neighbourhood search: windows of an incumbent's
  schedule re-optimised by the same model with the rest fixed (graphs of any size).
"""

from baselines.cpsat.bounds import closed_form_bound, lower_bound
from baselines.cpsat.cumulative import build_model
from baselines.cpsat.hint import best_heuristic
from baselines.cpsat.method import solve
from baselines.cpsat.model import CpModelHandles
from baselines.cpsat.sequence import build_sequence_model

__all__ = ["solve", "lower_bound", "closed_form_bound", "best_heuristic", "build_model",
           "build_sequence_model", "CpModelHandles"]

"""Pictures of one solution: each device's memory over time and a Gantt chart.

Drawn from `regal.sim.trace`, the same model that scored the solution, so the
curves peak exactly at the reported per-device peaks (each peak is marked with its
instant and value). matplotlib runs on the Agg backend: no display is needed.

A graph of a few dozen ops is drawn op by op, each bar labelled with its op's name.
Thousands of ops would be an unlabelled barcode, so larger graphs are drawn by group:
`group_ops` cuts the tree of name scopes (TensorFlow's `layer/op` names) into at most
`MAX_GROUPS` groups of similar compute time, ranges of sibling layers where a scope has
too many children, and contiguous runs of the dataflow order where names carry no scope
(synthetic graphs). Every op's bar takes its group's colour; a legend names the groups
and wide enough runs of one group carry its name.
"""

from regal.plots.bars import plot_method_bars
from regal.plots.figure import MAX_GROUPS, MAX_LINK_LANES, SMALL_GRAPH_OPS
from regal.plots.groups import OpGroups, group_ops, op_levels
from regal.plots.solution import peak_instants, plot_solution, plot_trace

__all__ = ["plot_solution", "plot_trace", "plot_method_bars", "group_ops", "op_levels",
           "peak_instants", "OpGroups", "MAX_GROUPS", "SMALL_GRAPH_OPS", "MAX_LINK_LANES"]

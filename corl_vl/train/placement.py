"""The former name of :mod:`corl_vl.train.rank_placement` (which ranks each agent of a launch gets), kept so that
imports of ``corl_vl.train.placement`` keep working; new code imports ``corl_vl.train.rank_placement``."""

from corl_vl.train.rank_placement import Placement, gpu_counts, nodes_from_ranks, place, simulated_nodes

__all__ = ["Placement", "gpu_counts", "nodes_from_ranks", "place", "simulated_nodes"]

"""Problems, datasets, paired views and the synthetic visual-math generator."""

from corl_vl.data.datasets import FieldMap, load_problems
from corl_vl.data.images import open_image
from corl_vl.data.paired import load_paired_view, verify_paired_views
from corl_vl.data.problem import Problem
from corl_vl.data.synth import generate_problems, to_text_problem, write_dataset

__all__ = [
    "FieldMap",
    "Problem",
    "generate_problems",
    "load_paired_view",
    "load_problems",
    "open_image",
    "to_text_problem",
    "verify_paired_views",
    "write_dataset",
]

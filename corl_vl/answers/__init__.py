"""Answers: extraction, equivalence (fast paths → math-verify under a hard time limit), voting, grading.

Everything Co-RL learns from passes through here: a completion's extracted answer votes for a peer's
pseudo-label, and equivalence decides both the vote's clusters and the reward. See docs/grading.md.
"""

from corl_vl.answers.equivalence import DEFAULT_TIMEOUT_S, clear_cache, equivalent
from corl_vl.answers.extract import DEFAULT_ORDER, EXTRACTION_MODES, extract_answer
from corl_vl.answers.grading import Graded, grade, grade_record
from corl_vl.answers.voting import TIE_POLICIES, Vote, cluster_answers, vote

__all__ = [
    "DEFAULT_ORDER",
    "DEFAULT_TIMEOUT_S",
    "EXTRACTION_MODES",
    "TIE_POLICIES",
    "Graded",
    "Vote",
    "clear_cache",
    "cluster_answers",
    "equivalent",
    "extract_answer",
    "grade",
    "grade_record",
    "vote",
]

"""The pixel skills: every answer is recomputed here from the rendered picture's pixels alone (not from the
parameters), so a drawing bug or an answer bug shows up as a disagreement; the mistake rules are consistent
and always wrong; the skills are opt-in and deterministic; blanking removes the picture's content."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from corl_vl.data.pixel_skills import PIXEL_SIZE, PIXEL_SKILLS, QUADRANTS
from corl_vl.data.synth import generate_problems, get_skill
from corl_vl.data.synth_skills import SHAPE_COLORS
from corl_vl.eval.greedy import blank_images

N = 40  # problems per skill


def _pixels(problem) -> np.ndarray:
    from corl_vl.data.images import open_image

    return np.asarray(open_image(problem.images[0]).convert("RGB"), dtype=int)


def _ink(pixels: np.ndarray) -> np.ndarray:
    """Mask of non-white pixels."""
    return (pixels != 255).any(axis=2)


def _nearest_color(rgb: np.ndarray) -> str:
    return min(SHAPE_COLORS, key=lambda name: float(np.abs(np.array(SHAPE_COLORS[name]) - rgb).sum()))


def _components(mask: np.ndarray) -> int:
    """Number of 4-connected ink regions (a small flood fill; the pictures are 112 × 112)."""
    seen = np.zeros_like(mask, dtype=bool)
    count = 0
    for y, x in zip(*np.nonzero(mask)):
        if seen[y, x]:
            continue
        count += 1
        stack = [(y, x)]
        seen[y, x] = True
        while stack:
            cy, cx = stack.pop()
            for ny, nx in ((cy + 1, cx), (cy - 1, cx), (cy, cx + 1), (cy, cx - 1)):
                if 0 <= ny < mask.shape[0] and 0 <= nx < mask.shape[1] and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
    return count


def _answer_from_pixels(skill: str, pixels: np.ndarray) -> str:
    ink = _ink(pixels)
    ys, xs = np.nonzero(ink)
    if skill == "spot_color":
        return _nearest_color(np.median(pixels[ink], axis=0))
    if skill == "spot_quadrant":
        right, bottom = xs.mean() > PIXEL_SIZE / 2, ys.mean() > PIXEL_SIZE / 2
        return {
            (False, False): "top left",
            (True, False): "top right",
            (True, True): "bottom right",
            (False, True): "bottom left",
        }[(right, bottom)]
    if skill == "spot_size":
        radius = np.sqrt(ink.sum() / np.pi)
        return "large" if radius > 14.5 else "small"  # the two radius ranges are 8–11 and 18–22
    if skill == "count_blobs":
        return str(_components(ink))
    if skill in ("figure_color", "ground_color"):
        rows, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
        colors: Counter[str] = Counter()
        for rgb, count in zip(rows, counts):
            colors[_nearest_color(rgb)] += int(count)
        (ground, _), (figure, _) = colors.most_common(2)  # the background covers most of the picture
        return ground if skill == "ground_color" else figure
    if skill == "tallest_bar":
        third = PIXEL_SIZE // 3
        heights = [ink[:, i * third : (i + 1) * third].any(axis=1).sum() for i in range(3)]
        return ("left", "middle", "right")[int(np.argmax(heights))]
    raise AssertionError(skill)


@pytest.mark.parametrize("skill", sorted(PIXEL_SKILLS))
def test_answers_agree_with_the_pixels(skill):
    problems = generate_problems(N, seed=7, skills=[skill])
    if skill in ("figure_color", "ground_color"):
        assert all(p.meta["params"]["figure"] != p.meta["params"]["ground"] for p in problems)
    for p in problems:
        assert p.meta["skill"] == skill and p.images[0].size == (PIXEL_SIZE, PIXEL_SIZE)
        assert _answer_from_pixels(skill, _pixels(p)) == p.answer, (p.id, p.meta["params"])
    # every class occurs, so a model cannot score by always giving one answer
    classes = {
        "spot_color": 6,
        "spot_quadrant": 4,
        "spot_size": 2,
        "count_blobs": 4,
        "tallest_bar": 3,
        "figure_color": 6,
        "ground_color": 6,
    }[skill]
    assert len(Counter(p.answer for p in problems)) == classes


@pytest.mark.parametrize("skill", sorted(PIXEL_SKILLS))
def test_mistake_is_consistent_and_always_wrong(skill):
    mistake = get_skill(skill).mistake
    assert mistake is not None
    for p in generate_problems(N, seed=8, skills=[skill]):
        wrong = mistake(p.meta["params"])
        assert wrong != p.answer and wrong == mistake(dict(p.meta["params"]))


def test_mistake_rules_are_the_documented_rotations():
    quadrant = get_skill("spot_quadrant").mistake
    assert [quadrant({"quadrant": q}) for q in QUADRANTS] == [*QUADRANTS[1:], QUADRANTS[0]]
    blobs = get_skill("count_blobs").mistake
    assert [blobs({"blobs": [0] * n}) for n in (1, 2, 3, 4)] == ["2", "3", "4", "1"]


def test_pixel_skills_are_opt_in_and_deterministic():
    default = generate_problems(20, seed=0)
    assert not {p.meta["skill"] for p in default} & set(PIXEL_SKILLS)
    a = generate_problems(10, seed=5, skills=["spot_quadrant", "tallest_bar"])
    b = generate_problems(10, seed=5, skills=["spot_quadrant", "tallest_bar"])
    assert [p.meta["params"] for p in a] == [p.meta["params"] for p in b]
    assert all((_pixels(x) == _pixels(y)).all() for x, y in zip(a, b))
    assert all(p.answer in p.meta["text_question"] for p in a if p.meta["skill"] == "spot_quadrant")


def test_blanked_pictures_are_white_and_keep_everything_else():
    problems = generate_problems(6, seed=1, skills=["spot_color", "count_blobs", "ground_color"])
    blank = blank_images(problems)
    for p, q in zip(problems, blank):
        assert (q.id, q.question, q.answer, q.meta) == (p.id, p.question, p.answer, p.meta)
        assert not _ink(_pixels(q)).any() and _ink(_pixels(p)).any()
        assert _pixels(q).shape == _pixels(p).shape

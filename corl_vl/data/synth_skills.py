"""The skills of the synthetic visual-math set: each draws a parameter dict, then renders it.

A skill is two pure functions. ``sample(rng)`` draws JSON-able parameters; ``render(params)`` turns them into
the picture, the question, the same question with the picture described in words (for text-only models),
the answer and the options (multiple choice) — deterministically, so the parameters stored with each record
are enough to recompute everything. Pictures are small (``SIZE`` pixels square) so tiny VLMs read them
cheaply; the size is a multiple of 28 and 14, the patch grids of common ViTs, so adapters need not resample.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from PIL import Image, ImageDraw, ImageFont

SIZE = 168
LETTERS = "ABCDEFGH"
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "blue": (40, 90, 220),
    "green": (30, 150, 60),
    "orange": (240, 140, 20),
    "purple": (140, 60, 180),
}
SHAPES = ("circle", "square", "triangle")
POLYGONS = {3: "triangle", 4: "square", 5: "pentagon", 6: "hexagon"}
BAR_LABELS = ("apple", "pear", "plum", "fig", "kiwi", "lime")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri")
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GRAY = (200, 200, 200)

Params = dict[str, Any]


@dataclass(frozen=True)
class Rendered:
    """Everything one parameter dict determines."""

    image: Image.Image
    question: str
    text_question: str
    answer: str
    choices: list[str] | None


@dataclass(frozen=True)
class Skill:
    """A named problem family: ``sample`` draws parameters, ``render`` is a pure function of them."""

    name: str
    multiple_choice: bool
    sample: Callable[[random.Random], Params]
    render: Callable[[Params], Rendered]
    # A plausible, *consistent* wrong answer for the given parameters (None: the skill has none). Warm starts
    # use it to give an agent systematic, self-consistent errors — the kind self-reward amplifies.
    mistake: Callable[[Params], str] | None = None


@cache
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    # Pillow's bundled default font: identical on every machine, no system fonts needed.
    return ImageFont.load_default(size=size)


def _canvas() -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (SIZE, SIZE), WHITE)
    return image, ImageDraw.Draw(image)


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _plural(word: str) -> str:
    return word + "s"


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


# --- counting shapes (free form) ------------------------------------------------------------------------

_COUNT_GRID = 4


def _sample_count(rng: random.Random) -> Params:
    target = [rng.choice(SHAPES), rng.choice(sorted(COLORS))]
    others = [[s, c] for s in SHAPES for c in sorted(COLORS) if [s, c] != target]
    n_target, n_other = rng.randint(1, 5), rng.randint(1, 6)
    kinds = [target] * n_target + [rng.choice(others) for _ in range(n_other)]
    cells = rng.sample(range(_COUNT_GRID**2), len(kinds))
    return {"target": target, "objects": sorted([cell, *kind] for cell, kind in zip(cells, kinds))}


def _render_count(params: Params) -> Rendered:
    image, draw = _canvas()
    step = SIZE // _COUNT_GRID
    for cell, shape, color in params["objects"]:
        x0, y0 = (cell % _COUNT_GRID) * step + 7, (cell // _COUNT_GRID) * step + 7
        box = (x0, y0, x0 + step - 14, y0 + step - 14)
        if shape == "circle":
            draw.ellipse(box, fill=COLORS[color])
        elif shape == "square":
            draw.rectangle(box, fill=COLORS[color])
        else:
            draw.polygon(
                [((box[0] + box[2]) / 2, box[1]), (box[2], box[3]), (box[0], box[3])], fill=COLORS[color]
            )
    shape, color = params["target"]
    question = f"How many {color} {_plural(shape)} are there in the picture?"
    seen = _listing([_a(f"{c} {s}") for _, s, c in params["objects"]])
    text = f"A picture shows these shapes, row by row from the top left: {seen}. {question}"
    answer = sum(1 for _, s, c in params["objects"] if [s, c] == params["target"])
    return Rendered(image, question, text, str(answer), None)


# --- reading and adding printed numbers (free form) -----------------------------------------------------

_NUMBER_GRID = 3


def _sample_numbers(rng: random.Random) -> Params:
    k = rng.randint(2, 3)
    cells = sorted(rng.sample(range(_NUMBER_GRID**2), k))
    numbers = [[cell, rng.randint(1, 50), rng.choice(sorted(COLORS))] for cell in cells]
    return {"numbers": numbers, "op": "difference" if k == 2 and rng.random() < 0.5 else "sum"}


def _render_numbers(params: Params) -> Rendered:
    image, draw = _canvas()
    step = SIZE // _NUMBER_GRID
    for cell, value, color in params["numbers"]:
        center = ((cell % _NUMBER_GRID + 0.5) * step, (cell // _NUMBER_GRID + 0.5) * step)
        draw.text(center, str(value), fill=COLORS[color], font=_font(28), anchor="mm")
    values = [value for _, value, _ in params["numbers"]]
    if params["op"] == "sum":
        question = "What is the sum of the numbers in the picture?"
        answer = sum(values)
    else:
        question = "What is the larger number minus the smaller number in the picture?"
        answer = max(values) - min(values)
    text = f"A picture shows the numbers {_listing([str(v) for v in values])}. {question}"
    return Rendered(image, question, text, str(answer), None)


# --- comparing bar heights (multiple choice) ------------------------------------------------------------


def _sample_bars(rng: random.Random) -> Params:
    m = rng.randint(3, 4)
    labels = rng.sample(BAR_LABELS, m)
    return {
        "labels": labels,
        "heights": rng.sample(range(1, 11), m),  # distinct, so the extreme bar is unique
        "colors": rng.sample(sorted(COLORS), m),
        "which": rng.choice(["tallest", "shortest"]),
        "choice_order": rng.sample(range(m), m),
    }


def _draw_bars(draw: ImageDraw.ImageDraw, labels: list[str], heights: list[int], colors: list[str]) -> None:
    base, unit, width = SIZE - 22, 12, SIZE // len(labels)
    for i, (label, height, color) in enumerate(zip(labels, heights, colors)):
        x0 = i * width + 6
        draw.rectangle((x0, base - height * unit, x0 + width - 12, base), fill=COLORS[color])
        draw.text((i * width + width / 2, base + 11), label, fill=BLACK, font=_font(11), anchor="mm")
    draw.line((0, base, SIZE, base), fill=BLACK, width=1)


def _render_bars(params: Params) -> Rendered:
    image, draw = _canvas()
    labels, heights = params["labels"], params["heights"]
    _draw_bars(draw, labels, heights, params["colors"])
    pick = max if params["which"] == "tallest" else min
    best = labels[heights.index(pick(heights))]
    choices = [labels[i] for i in params["choice_order"]]
    question = f"Which bar is the {params['which']}?"
    listing = _listing([f"{label} {height}" for label, height in zip(labels, heights)])
    text = f"A bar chart shows bars labelled {_listing(labels)} with heights {listing}. {question}"
    return Rendered(image, question, text, LETTERS[choices.index(best)], choices)


# --- reading a simple chart (free form) -----------------------------------------------------------------


def _sample_chart(rng: random.Random) -> Params:
    m = rng.randint(3, 5)
    kind = rng.choice(["bar", "line"])
    low = 1 if kind == "bar" else 0
    return {
        "kind": kind,
        "labels": list(DAYS[:m]),
        "values": [rng.randint(low, 10) for _ in range(m)],
        "target": rng.randrange(m),
    }


def _render_chart(params: Params) -> Rendered:
    image, draw = _canvas()
    left, top, bottom, unit = 24, 12, SIZE - 20, 13  # 10 units span 130 px
    labels, values = params["labels"], params["values"]
    for v in range(11):
        y = bottom - v * unit
        draw.line((left, y, SIZE - 4, y), fill=GRAY if v else BLACK, width=1)
        if v % 2 == 0:
            draw.text((left - 4, y), str(v), fill=BLACK, font=_font(10), anchor="rm")
    draw.line((left, top, left, bottom), fill=BLACK, width=1)
    width = (SIZE - 4 - left) / len(labels)
    centers = [left + (i + 0.5) * width for i in range(len(labels))]
    points = [(x, bottom - v * unit) for x, v in zip(centers, values)]
    if params["kind"] == "bar":
        for (x, y), color in zip(points, sorted(COLORS)):
            draw.rectangle((x - width * 0.3, y, x + width * 0.3, bottom), fill=COLORS[color])
    else:
        draw.line(points, fill=COLORS["blue"], width=2)
        for x, y in points:
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=COLORS["red"])
    for x, label in zip(centers, labels):
        draw.text((x, bottom + 10), label, fill=BLACK, font=_font(10), anchor="mm")
    target = labels[params["target"]]
    question = f"What is the value for {target} in the {params['kind']} chart?"
    listing = _listing([f"{label} {value}" for label, value in zip(labels, values)])
    text = f"A {params['kind']} chart shows the values {listing}. {question}"
    return Rendered(image, question, text, str(values[params["target"]]), None)


# --- counting polygon sides (multiple choice) -----------------------------------------------------------


def _sample_polygons(rng: random.Random) -> Params:
    k = rng.randint(2, 3)
    shapes = [
        [cell, rng.choice(sorted(POLYGONS)), rng.choice(sorted(COLORS)), rng.randrange(0, 360, 15)]
        for cell in sorted(rng.sample(range(4), k))
    ]
    total = sum(sides for _, sides, _, _ in shapes)
    wrong = rng.sample([t for t in range(total - 4, total + 5) if t != total and t > 0], 3)
    return {"shapes": shapes, "options": rng.sample([total, *wrong], 4)}


def _render_polygons(params: Params) -> Rendered:
    image, draw = _canvas()
    half = SIZE // 2
    for cell, sides, color, rotation in params["shapes"]:
        center = ((cell % 2 + 0.5) * half, (cell // 2 + 0.5) * half)
        draw.regular_polygon((center, half * 0.4), sides, rotation=rotation, fill=COLORS[color])
    question = "What is the total number of sides of all the shapes in the picture?"
    seen = _listing([_a(f"{color} {POLYGONS[sides]}") for _, sides, color, _ in params["shapes"]])
    text = f"A picture shows {seen}. {question}"
    total = sum(sides for _, sides, _, _ in params["shapes"])
    choices = [str(option) for option in params["options"]]
    return Rendered(image, question, text, LETTERS[choices.index(str(total))], choices)


# --- one filled polygon: its colour or its number of sides (free form) ----------------------------------
# Two skills on one picture type, simple enough for a 2-layer random model to learn in a minute or two, from
# pixels or from words. The picture is small (SHAPE_SIZE, a multiple of 28 and 14) to keep image tokens few.

SHAPE_SIZE = 112
SHAPE_COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "orange": (240, 140, 20),
    "yellow": (230, 210, 30),
    "green": (30, 150, 60),
    "blue": (40, 90, 220),
    "purple": (140, 60, 180),
}
SIDE_NAMES = {3: "triangle", 4: "square", 5: "pentagon", 6: "hexagon", 7: "heptagon", 8: "octagon"}


def _sample_shape(rng: random.Random) -> Params:
    return {
        "color": rng.choice(list(SHAPE_COLORS)),
        "sides": rng.choice(sorted(SIDE_NAMES)),
        "rotation": rng.randrange(0, 360, 5),
        "radius": rng.randint(36, 50),
        "dx": rng.randint(-4, 4),
        "dy": rng.randint(-4, 4),
    }


def _shape_picture(params: Params) -> tuple[Image.Image, str]:
    image = Image.new("RGB", (SHAPE_SIZE, SHAPE_SIZE), WHITE)
    center = (SHAPE_SIZE / 2 + params["dx"], SHAPE_SIZE / 2 + params["dy"])
    ImageDraw.Draw(image).regular_polygon(
        (center, params["radius"]),
        params["sides"],
        rotation=params["rotation"],
        fill=SHAPE_COLORS[params["color"]],
    )
    return image, f"A picture shows {_a(params['color'] + ' ' + SIDE_NAMES[params['sides']])}."


def _render_shape_color(params: Params) -> Rendered:
    image, seen = _shape_picture(params)
    question = "What color is the shape?"
    return Rendered(image, question, f"{seen} {question}", params["color"], None)


def _render_shape_sides(params: Params) -> Rendered:
    image, seen = _shape_picture(params)
    question = "How many sides does the shape have?"
    return Rendered(image, question, f"{seen} {question}", str(params["sides"]), None)


def _mistake_color(params: Params) -> str:
    """The next colour of the palette (red→orange→…→purple→red): a fixed colour permutation."""
    names = list(SHAPE_COLORS)
    return names[(names.index(params["color"]) + 1) % len(names)]


def _mistake_sides(params: Params) -> str:
    """One side too many (octagon → 3): a fixed miscount."""
    return str(3 + (params["sides"] - 2) % len(SIDE_NAMES))


SKILLS: dict[str, Skill] = {
    skill.name: skill
    for skill in (
        Skill("count_shapes", False, _sample_count, _render_count),
        Skill("add_numbers", False, _sample_numbers, _render_numbers),
        Skill("compare_bars", True, _sample_bars, _render_bars),
        Skill("read_chart", False, _sample_chart, _render_chart),
        Skill("polygon_sides", True, _sample_polygons, _render_polygons),
    )
}

# Skills outside the default set: ``generate_problems(skills=None)`` keeps producing the original five (so
# datasets and demos built before these existed are unchanged); select these by name.
EXTRA_SKILLS: dict[str, Skill] = {
    skill.name: skill
    for skill in (
        Skill("shape_color", False, _sample_shape, _render_shape_color, _mistake_color),
        Skill("shape_sides", False, _sample_shape, _render_shape_sides, _mistake_sides),
    )
}

"""Skills a tiny, randomly initialised VLM can learn from *pixels* in a short warm start.

Why these: the toy experiment must show the vision path at work (vision tower, image tokens, the VLM logprob
path), so its skills have to be readable from a small picture by a 2-layer model. Each asks about something
large and low-frequency — a colour, where a spot is, how big it is, how many blobs, which bar is tallest —
rather than fine shape detail (counting polygon sides was measured not to be learnable from pixels at this
size; benchmarks/science/README.md). Every skill has a consistent wrong rule (``mistake``) so warm starts can
plant systematic errors.

Pictures are ``PIXEL_SIZE`` square (a multiple of 28 and 14: no resampling on the built-in families' patch grids) and every
answer is one or two words or a digit, so rollouts stay a handful of tokens.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from corl_vl.data.synth_skills import SHAPE_COLORS, WHITE, Params, Rendered, Skill

PIXEL_SIZE = 112
_HALF = PIXEL_SIZE // 2
QUADRANTS = ("top left", "top right", "bottom right", "bottom left")  # clockwise, so "next" is a rotation
SIZES = {
    "small": (8, 11),
    "large": (18, 22),
}  # radius ranges in pixels; a gap between them, no borderline case
BAR_SLOTS = ("left", "middle", "right")
_COLORS = list(SHAPE_COLORS)


def _next(items: tuple[str, ...] | list[str], item: str) -> str:
    return items[(items.index(item) + 1) % len(items)]


def _canvas() -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (PIXEL_SIZE, PIXEL_SIZE), WHITE)
    return image, ImageDraw.Draw(image)


def _disk(draw: ImageDraw.ImageDraw, center: tuple[float, float], radius: float, color: str) -> None:
    x, y = center
    draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=SHAPE_COLORS[color])


# --- one spot: its colour, its quadrant, its size ---------------------------------------------------------


def _sample_spot(rng: random.Random) -> Params:
    size = rng.choice(sorted(SIZES))
    return {
        "color": rng.choice(_COLORS),
        "quadrant": rng.choice(QUADRANTS),
        "size": size,
        "radius": rng.randint(*SIZES[size]),
        "dx": rng.randint(-4, 4),
        "dy": rng.randint(-4, 4),
    }


def spot_center(params: Params) -> tuple[int, int]:
    """Centre of the spot: the middle of its quadrant, jittered by (dx, dy) — always inside the quadrant."""
    index = QUADRANTS.index(params["quadrant"])
    col = 1 if index in (1, 2) else 0
    row = 1 if index in (2, 3) else 0
    return col * _HALF + _HALF // 2 + params["dx"], row * _HALF + _HALF // 2 + params["dy"]


def _spot_picture(params: Params) -> tuple[Image.Image, str]:
    image, draw = _canvas()
    _disk(draw, spot_center(params), params["radius"], params["color"])
    seen = f"A picture shows a {params['size']} {params['color']} circle in the {params['quadrant']}."
    return image, seen


def _spot_skill(question: str, field: str):
    def render(params: Params) -> Rendered:
        image, seen = _spot_picture(params)
        return Rendered(image, question, f"{seen} {question}", params[field], None)

    return render


def _mistake_spot_color(params: Params) -> str:
    return _next(_COLORS, params["color"])


def _mistake_quadrant(params: Params) -> str:
    """The next quadrant clockwise (top left → top right → …): a fixed rotation."""
    return _next(QUADRANTS, params["quadrant"])


def _mistake_size(params: Params) -> str:
    return "small" if params["size"] == "large" else "large"


# --- counting 1–4 large, well-separated blobs -------------------------------------------------------------


def _sample_blobs(rng: random.Random) -> Params:
    n = rng.randint(1, 4)
    cells = sorted(rng.sample(range(4), n))
    return {
        "blobs": [
            [cell, rng.choice(_COLORS), rng.randint(12, 16), rng.randint(-5, 5), rng.randint(-5, 5)]
            for cell in cells
        ],
    }


def _render_blobs(params: Params) -> Rendered:
    image, draw = _canvas()
    for cell, color, radius, dx, dy in params["blobs"]:
        center = ((cell % 2) * _HALF + _HALF // 2 + dx, (cell // 2) * _HALF + _HALF // 2 + dy)
        _disk(draw, center, radius, color)
    n = len(params["blobs"])
    question = "How many circles are there?"
    colors = [color for _, color, _, _, _ in params["blobs"]]
    seen = f"A picture shows {n} circle{'s' if n > 1 else ''} ({', '.join(colors)})."
    return Rendered(image, question, f"{seen} {question}", str(n), None)


def _mistake_blobs(params: Params) -> str:
    """One too many (4 → 1): a fixed miscount."""
    return str(len(params["blobs"]) % 4 + 1)


# --- the tallest of three bars ----------------------------------------------------------------------------


def _sample_tallest(rng: random.Random) -> Params:
    return {"heights": rng.sample(range(3, 11), 3), "colors": [rng.choice(_COLORS) for _ in range(3)]}


def _render_tallest(params: Params) -> Rendered:
    image, draw = _canvas()
    width, base, unit = PIXEL_SIZE // 3, PIXEL_SIZE - 6, 10
    for i, (height, color) in enumerate(zip(params["heights"], params["colors"])):
        x0 = i * width + 6
        draw.rectangle((x0, base - height * unit, x0 + width - 12, base), fill=SHAPE_COLORS[color])
    tallest = BAR_SLOTS[params["heights"].index(max(params["heights"]))]
    question = "Which bar is the tallest: left, middle or right?"
    listing = ", ".join(f"{slot} {h}" for slot, h in zip(BAR_SLOTS, params["heights"]))
    return Rendered(
        image, question, f"A bar chart shows three bars of heights {listing}. {question}", tallest, None
    )


def _mistake_tallest(params: Params) -> str:
    """The bar to the right of the tallest (right → left)."""
    return _next(BAR_SLOTS, BAR_SLOTS[params["heights"].index(max(params["heights"]))])


# --- figure and ground: the colour of a large central disk, and of the background around it -------------------
# Both answers are read off large areas (the disk ≈ 20–30 % of the picture, the background the rest), the scale
# at which the tiny models were measured to read colour; they differ in *where* to look.


def _sample_figure(rng: random.Random) -> Params:
    figure, ground = rng.sample(_COLORS, 2)
    return {
        "figure": figure,
        "ground": ground,
        "radius": rng.randint(28, 34),
        "dx": rng.randint(-6, 6),
        "dy": rng.randint(-6, 6),
    }


def _figure_skill(question: str, field: str):
    def render(params: Params) -> Rendered:
        image = Image.new("RGB", (PIXEL_SIZE, PIXEL_SIZE), SHAPE_COLORS[params["ground"]])
        center = (_HALF + params["dx"], _HALF + params["dy"])
        _disk(ImageDraw.Draw(image), center, params["radius"], params["figure"])
        seen = f"A picture shows a {params['figure']} circle on a {params['ground']} background."
        return Rendered(image, question, f"{seen} {question}", params[field], None)

    return render


def _mistake_figure(params: Params) -> str:
    return _next(_COLORS, params["figure"])


def _mistake_ground(params: Params) -> str:
    return _next(_COLORS, params["ground"])


PIXEL_SKILLS: dict[str, Skill] = {
    skill.name: skill
    for skill in (
        Skill(
            "spot_color",
            False,
            _sample_spot,
            _spot_skill("What color is the circle?", "color"),
            _mistake_spot_color,
        ),
        Skill(
            "spot_quadrant",
            False,
            _sample_spot,
            _spot_skill("Where is the circle: top left, top right, bottom left or bottom right?", "quadrant"),
            _mistake_quadrant,
        ),
        Skill(
            "spot_size",
            False,
            _sample_spot,
            _spot_skill("Is the circle small or large?", "size"),
            _mistake_size,
        ),
        Skill("count_blobs", False, _sample_blobs, _render_blobs, _mistake_blobs),
        Skill("tallest_bar", False, _sample_tallest, _render_tallest, _mistake_tallest),
        Skill(
            "figure_color",
            False,
            _sample_figure,
            _figure_skill("What color is the circle?", "figure"),
            _mistake_figure,
        ),
        Skill(
            "ground_color",
            False,
            _sample_figure,
            _figure_skill("What color is the background?", "ground"),
            _mistake_ground,
        ),
    )
}

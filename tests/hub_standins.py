"""Local stand-ins for the hub datasets the recipes read, in the hub's own layout and documented schemas.

Each writer builds ``ROOT/data/<split>-00000-of-00001.parquet`` (what ``hf download`` leaves on disk) with the
columns and feature types of the real dataset's card — MMR1-Math-RL-Data-v0: ``images`` (list of images),
``problem`` (with an ``<image>`` placeholder), ``answer``; multimodal-open-r1-8k-verified: ``image``,
``problem``, ``solution`` (``<answer> … </answer>``), ``original_question``, ``original_answer``;
MATH-lighteval: ``problem``, ``level`` ("Level 1" … "Level 5"), ``type``, ``solution`` (answer in \\boxed{}).
Nothing is downloaded: tests point the loaders at these folders.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image as PILImage


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (32, 24), (value * 40 % 256, 90, 200)).save(buf, format="PNG")
    return buf.getvalue()


def _write(root: Path, split: str, columns: dict, features) -> Path:
    from datasets import Dataset

    path = root / "data" / f"{split}-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(columns, features=features).to_parquet(str(path))
    return root


def write_mmr1(root: Path, n: int = 6, split: str = "train") -> Path:
    from datasets import Features, Image, List, Value

    columns = {
        "images": [[{"bytes": _png(i), "path": None}] for i in range(n)],
        "problem": [f"<image>How many sides does shape {i} have?" for i in range(n)],
        "answer": [str(3 + i % 4) for i in range(n)],
    }
    features = Features({"images": List(Image()), "problem": Value("string"), "answer": Value("string")})
    return _write(root, split, columns, features)


def write_open_r1(root: Path, n: int = 6) -> Path:
    from datasets import Features, Image, Value

    columns = {
        "image": [{"bytes": _png(i), "path": None} for i in range(n)],
        "problem": [f"Based on the image, what is angle {i} in degrees?" for i in range(n)],
        "solution": [f"<answer> {30 + i} </answer>" for i in range(n)],
        "original_question": [f"What is angle {i}?" for i in range(n)],
        "original_answer": [f"The angle is {30 + i} degrees. Answer: {30 + i}" for i in range(n)],
    }
    features = Features(
        {
            "image": Image(),
            "problem": Value("string"),
            "solution": Value("string"),
            "original_question": Value("string"),
            "original_answer": Value("string"),
        }
    )
    return _write(root, "train", columns, features)


def write_math(root: Path, n: int = 10) -> Path:
    from datasets import Features, Value

    columns = {
        "problem": [f"Compute ${i} + {i}$." for i in range(n)],
        "level": [f"Level {1 + i % 5}" for i in range(n)],
        "type": ["Algebra" if i % 2 else "Prealgebra" for i in range(n)],
        "solution": [f"We add: ${i} + {i} = \\boxed{{{2 * i}}}$." for i in range(n)],
    }
    features = Features({name: Value("string") for name in columns})
    return _write(root, "train", columns, features)

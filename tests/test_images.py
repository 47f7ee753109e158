"""Image preparation shared by every adapter: RGB conversion, long-side cap with aspect kept, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from corl_vl.errors import CorlError
from model_adapters.images import ImageOptions, load_image, resize_long_side, to_rgb


@pytest.mark.parametrize(
    ("size", "cap", "expected"),
    [
        ((2048, 1536), 1024, (1024, 768)),  # 4:3 landscape
        ((600, 3000), 1024, (205, 1024)),  # 600 * 1024/3000 = 204.8 → 205
        ((1024, 10), 1024, (1024, 10)),  # exactly at the cap: untouched
        ((300, 200), 1024, (300, 200)),  # never upscaled
        ((5000, 3), 1000, (1000, 1)),  # extreme aspect: at least one pixel
        ((2048, 1536), None, (2048, 1536)),  # no cap
    ],
)
def test_long_side_is_capped_and_aspect_kept(size, cap, expected):
    out = resize_long_side(Image.new("RGB", size, (10, 20, 30)), cap)
    assert out.size == expected
    if cap is not None and max(size) > cap:
        assert abs(out.width / out.height - size[0] / size[1]) <= (size[0] / size[1]) / min(out.size)


def test_downscale_is_bicubic():
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (40, 80, 3), dtype=np.uint8))
    ours = np.asarray(resize_long_side(image, 20))
    assert np.array_equal(ours, np.asarray(image.resize((20, 10), Image.Resampling.BICUBIC)))
    assert not np.array_equal(ours, np.asarray(image.resize((20, 10), Image.Resampling.NEAREST)))


def test_rgba_transparent_pixels_become_white():
    rgba = Image.new("RGBA", (2, 1))
    rgba.putpixel((0, 0), (255, 0, 0, 255))  # opaque red
    rgba.putpixel((1, 0), (0, 0, 0, 0))  # fully transparent black
    out = to_rgb(rgba)
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (255, 0, 0)
    assert out.getpixel((1, 0)) == (255, 255, 255)


def test_half_transparent_is_blended_with_white():
    rgba = Image.new("RGBA", (1, 1), (0, 0, 0, 128))
    value = to_rgb(rgba).getpixel((0, 0))
    # alpha 128/255 of black over white: 255 * (1 - 128/255) = 127
    assert all(abs(v - 127) <= 1 for v in value)


def test_grayscale_and_palette_convert():
    gray = Image.new("L", (3, 2), 77)
    assert to_rgb(gray).getpixel((1, 1)) == (77, 77, 77)

    palette = Image.new("P", (2, 1))
    palette.putpalette([0, 0, 0, 10, 200, 30] + [0] * (256 * 3 - 6))
    palette.putpixel((1, 0), 1)
    assert to_rgb(palette).getpixel((1, 0)) == (10, 200, 30)

    palette.info["transparency"] = 0  # index 0 transparent → white
    out = to_rgb(palette)
    assert out.getpixel((0, 0)) == (255, 255, 255)
    assert out.getpixel((1, 0)) == (10, 200, 30)


def test_sixteen_bit_grayscale_is_scaled_not_clipped():
    values = np.array([[0, 32896, 65535]], dtype=np.uint16)
    out = to_rgb(Image.fromarray(values))
    assert [out.getpixel((x, 0))[0] for x in range(3)] == [0, 128, 255]


def test_load_image_from_path_converts(tmp_path):
    path = tmp_path / "diagram.png"
    Image.new("LA", (4, 3), (50, 255)).save(path)
    image = load_image(path)
    assert image.mode == "RGB" and image.size == (4, 3)
    assert image.getpixel((0, 0)) == (50, 50, 50)


def test_missing_image_names_the_file(tmp_path):
    path = tmp_path / "nowhere.png"
    with pytest.raises(CorlError, match=r"image file not found: .*nowhere\.png"):
        load_image(path)


def test_corrupt_image_names_the_file(tmp_path):
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"this is not an image at all")
    with pytest.raises(CorlError, match=r"cannot read image .*garbage\.jpg"):
        load_image(garbage)

    truncated = tmp_path / "truncated.png"
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:300])  # header fine, pixel data cut
    with pytest.raises(CorlError, match=r"cannot read image .*truncated\.png"):
        load_image(truncated)


def test_wrong_type_is_a_clear_error():
    with pytest.raises(CorlError, match="expected a PIL image or a file path, got int"):
        load_image(3)


def test_image_options_validated():
    with pytest.raises(CorlError, match="max_long_side"):
        ImageOptions(max_long_side=0)
    with pytest.raises(CorlError, match="min_pixels 100 > max_pixels 10"):
        ImageOptions(min_pixels=100, max_pixels=10)
    assert ImageOptions().max_long_side == 1024

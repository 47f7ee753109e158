"""corl_vl.io: JSONL errors name file:line; atomic writes leave the old content or the new, never half."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_vl.errors import CorlError
from corl_vl.io import atomic_dir, read_jsonl, replace_dir_atomic, write_jsonl_atomic, write_text_atomic


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ reading
def test_read_jsonl_line_numbers_skip_blank_lines(tmp_path: Path) -> None:
    # U+2028 inside a string is valid JSON and must not split the line.
    path = _write(tmp_path / "a.jsonl", '{"id": 1}\n\n   \n{"id": "x\u2028y"}\n')
    assert read_jsonl(path) == [(1, {"id": 1}), (4, {"id": "x\u2028y"})]


def test_read_jsonl_empty_file(tmp_path: Path) -> None:
    assert read_jsonl(_write(tmp_path / "e.jsonl", "")) == []


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", '{"id": 1}\n{"id": 2,\n')
    with pytest.raises(CorlError) as err:
        read_jsonl(path)
    message = str(err.value)
    assert message.startswith(f"{path}:2: invalid JSON (")
    assert "\n" not in message


def test_non_object_line_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "list.jsonl", '{"id": 1}\n{"id": 2}\n["id", 3]\n')
    with pytest.raises(CorlError, match=r"list\.jsonl:3: expected a JSON object, got an array$"):
        read_jsonl(path)
    path = _write(tmp_path / "null.jsonl", "null\n")
    with pytest.raises(CorlError, match=r"null\.jsonl:1: expected a JSON object, got null$"):
        read_jsonl(path)


def test_not_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": 1}\n{"q": "caf\xe9"}\n')
    with pytest.raises(CorlError, match=r"latin1\.jsonl:2: not UTF-8 text"):
        read_jsonl(path)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(CorlError, match=r"nope\.jsonl: no such responses file$"):
        read_jsonl(tmp_path / "nope.jsonl", what="responses file")
    with pytest.raises(CorlError, match=r": cannot read file \("):
        read_jsonl(tmp_path)


def test_skip_bad_drops_cut_and_non_object_lines(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    path.write_bytes(b'{"id": 1}\n[1]\n\xff\n{"id": 2}\n{"id": 3, "resp')  # last line cut mid-write
    assert read_jsonl(path, skip_bad=True) == [(1, {"id": 1}), (4, {"id": 2})]


# ------------------------------------------------------------------------------------------------ writing
def _only(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_jsonl_atomic_round_trip_and_no_temp_left(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "out.jsonl"  # the folder is created
    rows = [{"id": "a", "q": "π ≈ 3.14"}, {"id": "b", "n": 2}]
    write_jsonl_atomic(path, rows)
    assert path.read_text(encoding="utf-8") == '{"id": "a", "q": "π ≈ 3.14"}\n{"id": "b", "n": 2}\n'
    assert [row for _, row in read_jsonl(path)] == rows
    assert _only(path.parent) == ["out.jsonl"]


def test_write_jsonl_atomic_failure_keeps_old_content(tmp_path: Path) -> None:
    path = _write(tmp_path / "out.jsonl", '{"old": true}\n')
    rows = [{"id": 1}, {"id": 2, "bad": object()}]  # the second row is written after the first, then fails
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_jsonl_atomic(path, rows)
    assert path.read_text(encoding="utf-8") == '{"old": true}\n'
    assert _only(tmp_path) == ["out.jsonl"]


def test_write_jsonl_atomic_failure_without_old_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_jsonl_atomic(tmp_path / "out.jsonl", [{"x": {1, 2}}])
    assert _only(tmp_path) == []


def test_write_text_atomic_replaces(tmp_path: Path) -> None:
    path = _write(tmp_path / "latest", "step-000001")
    write_text_atomic(path, "step-000002")
    assert path.read_text() == "step-000002"
    assert _only(tmp_path) == ["latest"]


# ------------------------------------------------------------------------------------------------ folders
def _folder(path: Path, **files: str) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def test_replace_dir_atomic_swaps_folders(tmp_path: Path) -> None:
    out = _folder(tmp_path / "out", old="1")
    new = _folder(tmp_path / "new", fresh="2")
    replace_dir_atomic(new, out)
    assert _only(out) == ["fresh"]
    assert _only(tmp_path) == ["out"]  # the old folder and its hidden holder are gone


def test_replace_dir_atomic_keeps_old_folder_when_rename_fails(tmp_path: Path) -> None:
    out = _folder(tmp_path / "out", old="1")
    with pytest.raises(FileNotFoundError):
        replace_dir_atomic(tmp_path / "never-written", out)  # renaming the new folder in fails
    assert (out / "old").read_text() == "1"
    assert _only(tmp_path) == ["out"]


def test_replace_dir_atomic_file_and_folder_kinds(tmp_path: Path) -> None:
    out = _write(tmp_path / "view.jsonl", "old\n")
    replace_dir_atomic(_folder(tmp_path / "new", x="1"), out)  # a folder replaces a file
    assert _only(out) == ["x"]
    replace_dir_atomic(_write(tmp_path / "new.jsonl", "new\n"), out)  # a file replaces a folder
    assert out.read_text() == "new\n"
    assert _only(tmp_path) == ["view.jsonl"]


def test_atomic_dir_commits_on_success_only(tmp_path: Path) -> None:
    out = _folder(tmp_path / "data", old="1")
    with pytest.raises(RuntimeError), atomic_dir(out) as new:
        new.mkdir()
        (new / "half").write_text("…")
        raise RuntimeError("crash mid-write")
    assert _only(out) == ["old"]
    assert _only(tmp_path) == ["data"]  # the temporary folder is gone
    with atomic_dir(out) as new:
        new.mkdir()
        (new / "meta.json").write_text(json.dumps({"step": 1}))
    assert _only(out) == ["meta.json"]
    assert _only(tmp_path) == ["data"]

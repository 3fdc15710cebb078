"""One way to publish a file or folder: atomic, nothing left on error, the umask's mode."""

from __future__ import annotations

import os
import stat

import pytest

from geodiag.atomic import atomic_dir, atomic_path, atomic_write, atomic_write_many


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_publishes_with_the_umask_mode(tmp_path, umask_027):
    path = atomic_write(tmp_path / "sub" / "a.json", "{}\n")
    assert path.read_text() == "{}\n"
    assert mode(path) == 0o640  # 0666 & ~027, as a plain open() would make it, not mkstemp's 0600
    atomic_write(path, b"\x00\x01")  # replaces
    assert path.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    path = atomic_write(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_write_many_leaves_none_when_one_fails(tmp_path):
    def chunks():
        yield "x"
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write_many({tmp_path / "a.html": "<p>", tmp_path / "a.json": chunks()})
    assert list(tmp_path.iterdir()) == []
    atomic_write_many({tmp_path / "a.html": "<p>", tmp_path / "a.json": iter(["{", "}"])})
    assert (tmp_path / "a.json").read_text() == "{}"


def test_atomic_dir_replaces_a_folder_with_umask_modes(tmp_path, umask_027):
    target = tmp_path / "run"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_dir(target) as tmp:
        (tmp / "inner").mkdir()
        (tmp / "inner" / "x.txt").write_text("x")
    assert [p.name for p in target.iterdir()] == ["inner"]
    assert mode(target) == 0o750 and mode(target / "inner") == 0o750
    assert mode(target / "inner" / "x.txt") == 0o640
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "y").write_text("y")
        raise RuntimeError("killed")
    assert [p.name for p in target.iterdir()] == ["inner"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

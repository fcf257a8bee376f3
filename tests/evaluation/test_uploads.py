"""Archive uploads: unsafe members, bombs and non-JSON lines are refused before anything is
kept; a good archive lands under <base>/<tenant>/<upload_id>."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from service.evaluation.uploads import (
    UploadLimits,
    UploadRejected,
    UploadTooLarge,
    UploadUnsupported,
    extract,
    store,
    upload_root,
)

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"
LIMITS = UploadLimits(max_members=50, max_uncompressed_bytes=8 << 20, max_ratio=200.0)


def _json_only(data: bytes) -> bytes:
    keep = []
    for line in data.splitlines(keepends=True):
        try:
            json.loads(line)
        except ValueError:
            continue
        keep.append(line)
    return b"".join(keep)


def tiny_files(prefix: str = "", *, clean: bool = True) -> dict[str, bytes]:
    """The tiny fixture's files; ``clean`` drops its deliberately malformed row, which an
    upload (stricter than a dataset directory) refuses."""
    return {
        prefix + p.relative_to(TINY).as_posix(): _json_only(p.read_bytes())
        if clean
        else p.read_bytes()
        for p in sorted(TINY.rglob("*.jsonl"))
    }


def make_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def make_tar(files: dict[str, bytes], link: tuple[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link[0])
            info.type = tarfile.SYMTYPE
            info.linkname = link[1]
            archive.addfile(info)
    return buffer.getvalue()


def _rejected(data: bytes, tmp_path: Path, limits: UploadLimits = LIMITS) -> UploadRejected:
    with pytest.raises(UploadRejected) as caught:
        store(data, tmp_path / "uploads", "tenant", limits)
    # Nothing is left behind, not even the staging folder.
    tenant_dir = tmp_path / "uploads" / "tenant"
    assert not tenant_dir.exists() or list(tenant_dir.iterdir()) == []
    return caught.value


@pytest.mark.parametrize("pack", [make_zip, make_tar])
@pytest.mark.parametrize("prefix", ["", "pf_release/"])
def test_good_archive_is_stored(tmp_path: Path, pack: object, prefix: str) -> None:
    data = pack(tiny_files(prefix))  # type: ignore[operator]
    stored = store(data, tmp_path / "uploads", "tenant", LIMITS)
    assert "persona/all_personas.jsonl" in stored.files
    assert "data/spedific/hard.jsonl" in stored.files
    root = upload_root(tmp_path / "uploads", "tenant", stored.upload_id)
    assert root == stored.root
    assert (root / "data" / "general" / "easy.jsonl").read_bytes() == (
        TINY / "data" / "general" / "easy.jsonl"
    ).read_bytes()
    # Another tenant cannot name it; a malformed id names nothing.
    assert upload_root(tmp_path / "uploads", "other", stored.upload_id) is None
    assert upload_root(tmp_path / "uploads", "tenant", "../tenant") is None


@pytest.mark.parametrize(
    "name", ["../evil.jsonl", "data/../../evil.jsonl", "/etc/evil.jsonl", "C:/evil", "a\\..\\b"]
)
def test_path_traversal_is_refused(tmp_path: Path, name: str) -> None:
    error = _rejected(make_zip(tiny_files() | {name: b"{}\n"}), tmp_path)
    assert type(error) is UploadRejected and error.slug == "unsafe-archive-member"
    assert not (tmp_path / "evil.jsonl").exists()


def test_symlinks_are_refused(tmp_path: Path) -> None:
    error = _rejected(
        make_tar(tiny_files(), link=("data/general/x.jsonl", "/etc/passwd")), tmp_path
    )
    assert type(error) is UploadRejected and "link" in error.detail

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in tiny_files().items():
            archive.writestr(name, data)
        info = zipfile.ZipInfo("data/general/link.jsonl")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    error = _rejected(buffer.getvalue(), tmp_path)
    assert type(error) is UploadRejected and "link" in error.detail


@pytest.mark.parametrize("pack", [make_zip, make_tar])
def test_zip_bomb_is_refused_before_writing(tmp_path: Path, pack: object) -> None:
    # 6 MiB of one repeated byte compresses about 1000-fold.
    data = pack(tiny_files() | {"data/general/hard.jsonl": b"\n" * (6 << 20)})  # type: ignore[operator]
    assert len(data) < 64 << 10
    error = _rejected(data, tmp_path)
    assert isinstance(error, UploadTooLarge) and "zip bomb" in error.detail


def test_total_size_and_member_count_limits(tmp_path: Path) -> None:
    small = UploadLimits(max_members=50, max_uncompressed_bytes=500, max_ratio=200.0)
    error = _rejected(make_zip(tiny_files()), tmp_path, small)
    assert isinstance(error, UploadTooLarge) and "expands to" in error.detail
    many = tiny_files() | {f"extra/{i}.txt": b"x" for i in range(60)}
    error = _rejected(make_zip(many), tmp_path)
    assert isinstance(error, UploadTooLarge) and "members" in error.detail


def test_non_json_line_is_named_with_file_and_line(tmp_path: Path) -> None:
    files = tiny_files(clean=False)
    files["data/general/easy.jsonl"] += b"this is not json\n"
    error = _rejected(make_zip(files), tmp_path)
    assert type(error) is UploadRejected and error.slug == "invalid-jsonl"
    # The fixture's own malformed row (hard.jsonl line 2) is reported too.
    messages = [e["message"] for e in error.errors]
    assert any(m.startswith("data/general/easy.jsonl:3: not JSON") for m in messages)
    assert any(m.startswith("data/spedific/hard.jsonl:2: not JSON") for m in messages)


def test_not_an_archive_or_no_layout(tmp_path: Path) -> None:
    assert isinstance(_rejected(b"just some text", tmp_path), UploadUnsupported)
    error = _rejected(make_zip({"readme.txt": b"hello"}), tmp_path)
    assert type(error) is UploadRejected and "all_personas.jsonl" in error.detail
    assert type(_rejected(b"PK\x03\x04garbage", tmp_path)) is UploadRejected


def test_extract_writes_only_regular_files(tmp_path: Path) -> None:
    extract(make_tar(tiny_files()), tmp_path, LIMITS)
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(tiny_files())

"""Uploaded PersonaFeedback archives (.zip or .tar.gz), checked before anything is written.

Refused with a 4xx before extraction: an unknown format (415); an absolute name, a `..` part,
a backslash or drive name, a link, device or other special member (422); too many members,
too many uncompressed bytes, or a compression ratio typical of a zip bomb (413). After
extraction into a temporary folder, every line of every .jsonl file must be JSON (422 naming
file:line) and the release layout must be there; only then is the folder moved to
``<base>/<tenant_id>/<upload_id>``, so a rejected upload leaves nothing behind.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from service.store.ids import new_id

UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")
# Below this many uncompressed bytes no ratio is suspicious (tiny files compress oddly).
RATIO_FLOOR_BYTES = 1 << 20
_CHUNK = 1 << 16
_MAX_REPORTED = 20


class UploadRejected(Exception):
    """The archive is not a dataset this service accepts; ``slug`` names why."""

    def __init__(self, detail: str, slug: str, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.slug = slug
        self.errors = errors or []


class UploadTooLarge(UploadRejected):
    """Over a size, member or expansion-ratio limit."""


class UploadUnsupported(UploadRejected):
    """Not a .zip or .tar.gz archive."""


@dataclass(frozen=True)
class UploadLimits:
    max_members: int = 1000
    max_uncompressed_bytes: int = 512 << 20
    max_ratio: float = 200.0


@dataclass(frozen=True)
class _Member:
    name: str
    size: int
    is_dir: bool


@dataclass
class StoredUpload:
    upload_id: str
    root: Path
    files: list[str] = field(default_factory=list)


def _bad(detail: str, slug: str = "invalid-archive") -> UploadRejected:
    return UploadRejected(detail, slug, [{"field": "file", "message": detail}])


def _too_large(detail: str) -> UploadRejected:
    return UploadTooLarge(detail, "archive-too-large", [{"field": "file", "message": detail}])


def safe_name(name: str) -> PurePosixPath:
    """The member's relative path, or UploadRejected for a name that could leave the folder."""
    if not name or "\x00" in name or "\\" in name:
        raise _bad(f"member name {name!r} is not allowed", "unsafe-archive-member")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise _bad(f"member {name!r} has an absolute path", "unsafe-archive-member")
    path = PurePosixPath(name)
    if any(part == ".." for part in path.parts):
        raise _bad(f"member {name!r} leaves the archive folder (..)", "unsafe-archive-member")
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts:
        raise _bad(f"member name {name!r} is empty", "unsafe-archive-member")
    return PurePosixPath(*parts)


def _zip_members(archive: zipfile.ZipFile, limits: UploadLimits) -> list[_Member]:
    members = []
    for info in archive.infolist():
        # Unix type bits, when the archiver recorded them (many leave them 0: a plain file).
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise _bad(
                f"member {info.filename!r} is a link or special file", "unsafe-archive-member"
            )
        if info.flag_bits & 0x1:
            raise _bad(f"member {info.filename!r} is encrypted")
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > limits.max_ratio * max(
            info.compress_size, 1
        ):
            ratio = info.file_size / max(info.compress_size, 1)
            raise _too_large(
                f"member {info.filename!r} expands {ratio:.0f}-fold "
                f"(limit {limits.max_ratio:g}); refusing a likely zip bomb"
            )
        members.append(_Member(info.filename, info.file_size, info.is_dir()))
    return members


def _gzip_size(data: bytes, limit: int) -> int:
    """Uncompressed size of a gzip stream, stopping as soon as it passes ``limit``."""
    inflater = zlib.decompressobj(wbits=31)
    size = 0
    view = memoryview(data)
    for start in range(0, len(data), _CHUNK):
        pending = view[start : start + _CHUNK].tobytes()
        while pending:
            # Bounded output per call, so a bomb never materialises in memory.
            size += len(inflater.decompress(pending, _CHUNK))
            if size > limit:
                return size
            pending = inflater.unconsumed_tail
        if inflater.eof:
            break
    return size


def _tar_members(archive: tarfile.TarFile) -> list[_Member]:
    members = []
    for info in archive.getmembers():
        if not (info.isreg() or info.isdir()):
            raise _bad(f"member {info.name!r} is a link or special file", "unsafe-archive-member")
        members.append(_Member(info.name, info.size, info.isdir()))
    return members


def _check(members: list[_Member], compressed: int, limits: UploadLimits) -> None:
    if len(members) > limits.max_members:
        raise _too_large(f"the archive has {len(members)} members (limit {limits.max_members})")
    for member in members:
        safe_name(member.name)
    total = sum(m.size for m in members)
    if total > limits.max_uncompressed_bytes:
        raise _too_large(
            f"the archive expands to {total} bytes (limit {limits.max_uncompressed_bytes})"
        )
    if total > RATIO_FLOOR_BYTES and total > limits.max_ratio * max(compressed, 1):
        raise _too_large(
            f"the archive expands {total / max(compressed, 1):.0f}-fold "
            f"(limit {limits.max_ratio:g}); refusing a likely zip bomb"
        )


def _write(stream: IO[bytes] | None, target: Path, size: int) -> None:
    if stream is None:
        raise _bad(f"member {target.name!r} has no data")
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with target.open("wb") as out:
        while chunk := stream.read(_CHUNK):
            written += len(chunk)
            # The declared size was checked against the limits; data beyond it is a lie.
            if written > size:
                raise _too_large(f"member {target.name!r} holds more data than it declares")
            out.write(chunk)


def extract(data: bytes, dest: Path, limits: UploadLimits) -> None:
    """Check the whole archive, then write its regular files under ``dest``."""
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile as exc:
            raise _bad(f"not a readable zip archive ({exc})") from None
        with archive:
            members = _zip_members(archive, limits)
            _check(members, len(data), limits)
            try:
                for info, member in zip(archive.infolist(), members, strict=True):
                    if not member.is_dir:
                        with archive.open(info) as stream:
                            _write(stream, dest / safe_name(member.name), member.size)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise _bad(f"the zip archive is corrupt ({exc})") from None
        return
    if data[:2] == b"\x1f\x8b":
        try:
            expanded = _gzip_size(data, limits.max_uncompressed_bytes)
        except zlib.error as exc:
            raise _bad(f"not a readable gzip stream ({exc})") from None
        if expanded > limits.max_uncompressed_bytes:
            raise _too_large(f"the archive expands to over {limits.max_uncompressed_bytes} bytes")
        if expanded > RATIO_FLOOR_BYTES and expanded > limits.max_ratio * len(data):
            raise _too_large(
                f"the archive expands {expanded / len(data):.0f}-fold "
                f"(limit {limits.max_ratio:g}); refusing a likely zip bomb"
            )
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = _tar_members(tar)
                _check(members, len(data), limits)
                for entry, member in zip(tar.getmembers(), members, strict=True):
                    if not member.is_dir:
                        _write(tar.extractfile(entry), dest / safe_name(member.name), member.size)
        except (tarfile.TarError, zlib.error, EOFError) as exc:
            raise _bad(f"not a readable .tar.gz archive ({exc})") from None
        return
    raise UploadUnsupported(
        "the upload must be a .zip or .tar.gz archive",
        "unsupported-archive",
        [{"field": "file", "message": "expected a .zip or .tar.gz archive"}],
    )


def dataset_root(folder: Path) -> Path | None:
    """The folder holding persona/all_personas.jsonl: the upload itself or its only subfolder
    (archives made by zipping a folder wrap everything in it)."""
    if (folder / "persona" / "all_personas.jsonl").is_file():
        return folder
    subfolders = [p for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    if len(subfolders) == 1 and (subfolders[0] / "persona" / "all_personas.jsonl").is_file():
        return subfolders[0]
    return None


def _jsonl_files(root: Path) -> Iterator[Path]:
    yield root / "persona" / "all_personas.jsonl"
    data = root / "data"
    if data.is_dir():
        yield from sorted(data.glob("*/*.jsonl"))


def validate_layout(folder: Path) -> tuple[Path, list[str]]:
    """The dataset root and its data files; UploadRejected naming each non-JSON line."""
    root = dataset_root(folder)
    if root is None:
        raise _bad("the archive has no persona/all_personas.jsonl (PersonaFeedback layout)")
    files = list(_jsonl_files(root))
    if len(files) < 2:
        raise _bad("the archive has no data/<split>/<tier>.jsonl files")
    errors: list[dict[str, str]] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    json.loads(raw)
                except (ValueError, UnicodeDecodeError) as exc:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                    errors.append(
                        {"field": "file", "message": f"{rel}:{number}: not JSON ({reason})"}
                    )
    if errors:
        shown = errors[:_MAX_REPORTED]
        detail = "; ".join(e["message"] for e in shown)
        if len(errors) > len(shown):
            detail += f"; and {len(errors) - len(shown)} more"
        raise UploadRejected(detail, "invalid-jsonl", shown)
    return root, [p.relative_to(root).as_posix() for p in files]


def store(data: bytes, base: Path, tenant_id: str, limits: UploadLimits) -> StoredUpload:
    """Check, extract and validate an archive; keep it under base/<tenant_id>/<upload_id>.

    Blocking (disk and decompression): call through a worker thread.
    """
    upload_id = new_id()
    tenant_dir = base / tenant_id
    staging = tenant_dir / f".staging-{upload_id}"
    staging.mkdir(parents=True)
    try:
        extract(data, staging, limits)
        root, files = validate_layout(staging)
        final = tenant_dir / upload_id
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return StoredUpload(upload_id, final / root.relative_to(staging), files)


def upload_root(base: Path, tenant_id: str, upload_id: str) -> Path | None:
    """A tenant's stored upload, or None (unknown id, another tenant's, or gone from disk)."""
    if not UPLOAD_ID.match(upload_id):
        return None
    return dataset_root(base / tenant_id / upload_id)

"""The embedder: the wheel-carried all-MiniLM-L6-v2, loaded with no network at all."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from service.inference.embedder import Embedder


class NetworkUsed(AssertionError):
    pass


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise NetworkUsed(f"network access attempted: {args}")

    # Any connection attempt (a hub lookup, a telemetry ping) fails the load.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        patch.setattr(socket, "create_connection", refuse)
        loaded = Embedder.load(threads=1)
        loaded.encode(["warm up"])
    yield loaded
    loaded.close()


def test_vectors_are_normalised_384_float32(embedder: Embedder) -> None:
    vectors = embedder.encode(["I love dogs", "The stock market fell", "a"])
    assert embedder.dim == 384
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


def test_similar_meanings_are_closer(embedder: Embedder) -> None:
    dogs, puppies, stocks = embedder.encode(
        ["I love dogs", "I adore puppies", "The stock market fell"]
    )
    assert float(dogs @ puppies) > float(dogs @ stocks) + 0.2


async def test_aencode_matches_encode(embedder: Embedder) -> None:
    texts = ["I love dogs", "I adore puppies"]
    np.testing.assert_allclose(await embedder.aencode(texts), embedder.encode(texts), atol=1e-6)


def test_blob_round_trip(embedder: Embedder) -> None:
    vector = embedder.encode(["I love dogs"])[0]
    blob = Embedder.to_bytes(vector)
    assert isinstance(blob, bytes) and len(blob) == 384 * 4
    back = Embedder.from_bytes(blob)
    assert back.dtype == np.float32 and back.flags.writeable
    np.testing.assert_array_equal(back, vector)


def test_blob_is_little_endian_float32() -> None:
    assert Embedder.to_bytes(np.array([1.0], dtype=np.float64)) == b"\x00\x00\x80\x3f"
    assert Embedder.from_bytes(b"\x00\x00\x80\x3f").tolist() == [1.0]
    big_endian = np.array([1.0, -2.5], dtype=">f4")
    assert Embedder.from_bytes(Embedder.to_bytes(big_endian)).tolist() == [1.0, -2.5]


def test_bad_blobs_and_shapes_are_rejected() -> None:
    with pytest.raises(ValueError):
        Embedder.from_bytes(b"\x00\x00\x80")
    with pytest.raises(ValueError):
        Embedder.to_bytes(np.zeros((2, 3), dtype=np.float32))


def test_missing_folder_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="embedder folder"):
        Embedder.load(tmp_path / "nope")

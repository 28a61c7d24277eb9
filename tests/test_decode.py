"""Response bodies decompressed in bounded pieces (subagent.llm._decode)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator, Sequence

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subagent.llm._decode import PIECE, DecodedChunks, decoded_chunks

pytestmark = pytest.mark.anyio


class Pieces(httpx.AsyncByteStream):
    """A raw body arriving in the given pieces."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = list(pieces)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def response(pieces: Sequence[bytes], encoding: str | None) -> httpx.Response:
    headers = {"content-encoding": encoding} if encoding else {}
    return httpx.Response(200, headers=headers, stream=Pieces(pieces))


async def read(chunks: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in chunks]


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


async def test_a_gzip_bomb_inflates_in_pieces_of_at_most_64_kib() -> None:
    data = b"a" * 10_000_000
    compressed = gzip.compress(data)
    pieces = await read(DecodedChunks(response([compressed], "gzip")))
    assert max(len(piece) for piece in pieces) <= PIECE
    assert b"".join(pieces) == data


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("gzip, deflate", lambda data: zlib.compress(gzip.compress(data))),
        (None, lambda data: data),
        ("identity", lambda data: data),
    ],
)
async def test_every_encoding_asked_for_is_decoded(encoding: str | None, encode: object) -> None:
    data = b"the quick brown fox " * 20_000
    compressed = encode(data)  # type: ignore[operator]
    halves = [compressed[: len(compressed) // 2], compressed[len(compressed) // 2 :]]
    chunks = decoded_chunks(response(halves, encoding))
    assert isinstance(chunks, DecodedChunks)
    assert b"".join(await read(chunks)) == data


async def test_an_encoding_never_asked_for_is_left_to_httpx() -> None:
    chunks = decoded_chunks(response([b"abc"], "compress"))
    assert not isinstance(chunks, DecodedChunks)


async def test_corrupt_compressed_data_is_a_decoding_error() -> None:
    with pytest.raises(httpx.DecodingError):
        await read(DecodedChunks(response([b"\x1f\x8b\x08\x00" + b"\xff" * 50], "gzip")))


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(max_size=3000).map(lambda data: data * 50),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_chunking_of_a_gzip_body_decodes_to_the_same_bytes(
    data: bytes, cuts: list[int]
) -> None:
    compressed = gzip.compress(data)
    points = sorted({cut % (len(compressed) + 1) for cut in cuts})
    bounds = zip([0, *points], [*points, len(compressed)], strict=True)
    pieces = [compressed[start:end] for start, end in bounds]
    decoded = anyio.run(read, DecodedChunks(response(pieces, "gzip")))
    assert b"".join(decoded) == data
    assert all(len(piece) <= PIECE for piece in decoded)


async def test_a_closed_response_inflates_nothing_more() -> None:
    chunks = DecodedChunks(response([gzip.compress(b"a" * 5_000_000)], "gzip"))
    assert len(await chunks.__anext__()) == PIECE
    await chunks._response.aclose()
    # The 5 MB the raw piece still holds are dropped, not inflated for a reader that left.
    with pytest.raises((StopAsyncIteration, httpx.StreamClosed)):
        await chunks.__anext__()

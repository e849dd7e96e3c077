"""A stored value as one format byte and a zstd frame made with a frozen dictionary (chains and idempotency
lanes since issue 29's second step; :mod:`worker.documents.chain_codec`, :mod:`worker.documents.lane_codec`).

The frame is zstd's magicless one (``FORMAT_ZSTD1_MAGICLESS``: the format byte already says what follows, so
the 4-byte magic number would say it twice), with the value's size and without a checksum or a dictionary id
(the format byte names the dictionary). The dictionary is a zstd "full" dictionary: a frozen vocabulary as its
content, and entropy tables fitted to the engine's own values (``python -m bench.dictionaries`` makes one). Its
compressor digests it once per thread, where deflate hashed its preset dictionary into every new compressor:
a chain compresses in about a fifth of deflate's time, and to fewer bytes (docs/decisions.md).

Compressors and decompressors are kept per thread (python-zstandard's are not safe to share between threads);
the first use in a thread builds them, nothing is built at import.
"""

from __future__ import annotations

import threading

import zstandard

__all__ = ["ZstdForm"]

LEVEL = 3  # zstd's default; 1 wrote ~4% more bytes per chain and took about as long (docs/decisions.md)
# The most a stored value may say it holds: a frame's header names its size and the read allocates it first, so
# a damaged header could ask for any amount (the largest chain, 500 nodes of events of at most 256 KiB, is far
# less than this).
MAX_VALUE_BYTES = 64 * 1024 * 1024


class ZstdForm:
    """One format byte and its frozen zstd dictionary: :meth:`encode` a value, :meth:`decode` one back."""

    __slots__ = ("_local", "dictionary", "first_byte", "form")

    def __init__(self, form: int, dictionary: bytes) -> None:
        self.form = form
        self.dictionary = dictionary
        self.first_byte = bytes([form])  # what a stored value of this form starts with
        self._local = threading.local()

    def _dictionary(self) -> zstandard.ZstdCompressionDict:
        return zstandard.ZstdCompressionDict(self.dictionary, dict_type=zstandard.DICT_TYPE_FULLDICT)

    def _compressor(self) -> zstandard.ZstdCompressor:
        dictionary = self._dictionary()
        dictionary.precompute_compress(level=LEVEL)
        params = zstandard.ZstdCompressionParameters.from_level(
            LEVEL,
            format=zstandard.FORMAT_ZSTD1_MAGICLESS,
            write_content_size=1,
            write_checksum=0,
            write_dict_id=0,
        )
        compressor = zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params)
        self._local.compressor = compressor
        return compressor

    def _decompressor(self) -> zstandard.ZstdDecompressor:
        decompressor = zstandard.ZstdDecompressor(
            dict_data=self._dictionary(), format=zstandard.FORMAT_ZSTD1_MAGICLESS
        )
        self._local.decompressor = decompressor
        return decompressor

    def encode(self, data: bytes) -> bytes:
        """The format byte and ``data``'s frame."""
        compressor = getattr(self._local, "compressor", None) or self._compressor()
        return self.first_byte + compressor.compress(data)

    def decode(self, stored: bytes, what: str) -> bytes:
        """The value of ``stored`` (format byte and frame); ValueError naming ``what`` when it does not
        decompress, names no size or a size over :data:`MAX_VALUE_BYTES`, or is followed by anything."""
        frame = stored[1:]
        try:
            size = zstandard.get_frame_parameters(frame, format=zstandard.FORMAT_ZSTD1_MAGICLESS).content_size
        except zstandard.ZstdError as exc:
            raise ValueError(f"{what} does not decompress: {exc}") from None
        if size > MAX_VALUE_BYTES:  # also zstd's "unknown" and "error" sizes, the largest numbers
            raise ValueError(f"{what} does not decompress: its frame claims {size} bytes")
        decompressor = getattr(self._local, "decompressor", None) or self._decompressor()
        try:
            return decompressor.decompress(frame, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise ValueError(f"{what} does not decompress: {exc}") from None

"""The wire payload: what one worker puts on the network for one tensor.

A :class:`Payload` is the whole message: a small binary header (payload format, codec name and
version, dtype, shape, and the few decode-time settings a codec needs, such as QSGD's level count)
followed by the codec's body bytes.  ``payload.nbytes`` is *exactly* ``len(payload.to_bytes())``,
and it is the only size gcbench ever reports: no formula stands in for a real encoding.

The body is a 1-D ``uint8`` tensor that may stay on the device it was produced on, so timing a
GPU compressor is not distorted by a device-to-host copy; ``to_bytes`` copies it to the host.

Header layout (all integers LEB128 varints unless noted)::

    u8  format version (1)
    u8  len(codec) , codec name (ASCII)
    var compressor version
    u8  dtype code
    u8  ndim , var dim[0..ndim)
    u8  number of meta entries, then per entry:
        u8 len(key), key (ASCII), u8 type tag ('i' zigzag varint | 'f' float64 | 's' u8 len + ASCII)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from gcbench.errors import PayloadError

FORMAT_VERSION = 1

_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
)
_DTYPE_CODE = {dt: i for i, dt in enumerate(_DTYPES)}

MetaValue = int | float | str


def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("varint of a negative number")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    n = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise PayloadError("payload header is truncated")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7
        if shift > 70:
            raise PayloadError("payload header has an overlong varint")


def _zigzag(n: int) -> int:
    return (n << 1) if n >= 0 else ((-n << 1) - 1)


def _unzigzag(n: int) -> int:
    return (n >> 1) if not n & 1 else -((n + 1) >> 1)


def _short_ascii(s: str, what: str) -> bytes:
    b = s.encode("ascii")
    if len(b) > 255:
        raise ValueError(f"{what} {s!r} is longer than 255 bytes")
    return bytes([len(b)]) + b


def encode_header(
    codec: str,
    version: int,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    meta: Mapping[str, MetaValue],
) -> bytes:
    """Serialise a payload header (see the module docstring for the layout)."""
    if dtype not in _DTYPE_CODE:
        raise ValueError(f"dtype {dtype} cannot be carried in a payload")
    parts = [bytes([FORMAT_VERSION]), _short_ascii(codec, "codec name"), _varint(version)]
    parts.append(bytes([_DTYPE_CODE[dtype], len(shape)]))
    parts.extend(_varint(int(s)) for s in shape)
    parts.append(bytes([len(meta)]))
    for key, value in meta.items():
        parts.append(_short_ascii(key, "meta key"))
        if isinstance(value, bool | int | np.integer):
            parts.append(b"i" + _varint(_zigzag(int(value))))
        elif isinstance(value, float | np.floating):
            parts.append(b"f" + struct.pack("<d", float(value)))
        elif isinstance(value, str):
            parts.append(b"s" + _short_ascii(value, "meta value"))
        else:
            raise TypeError(f"meta value {key}={value!r} must be int, float or str")
    return b"".join(parts)


def decode_header(buf: bytes) -> tuple[str, int, torch.dtype, tuple[int, ...], dict[str, MetaValue], int]:
    """Parse a header; returns (codec, version, dtype, shape, meta, body offset)."""
    try:
        if not buf:
            raise PayloadError("payload is empty")
        if buf[0] != FORMAT_VERSION:
            raise PayloadError(f"payload format version {buf[0]} is not supported (expected {FORMAT_VERSION})")
        pos = 1
        n = buf[pos]
        codec = buf[pos + 1 : pos + 1 + n].decode("ascii")
        pos += 1 + n
        version, pos = _read_varint(buf, pos)
        dcode, ndim = buf[pos], buf[pos + 1]
        pos += 2
        if dcode >= len(_DTYPES):
            raise PayloadError(f"payload has unknown dtype code {dcode}")
        shape = []
        for _ in range(ndim):
            s, pos = _read_varint(buf, pos)
            shape.append(s)
        nmeta = buf[pos]
        pos += 1
        meta: dict[str, MetaValue] = {}
        for _ in range(nmeta):
            n = buf[pos]
            key = buf[pos + 1 : pos + 1 + n].decode("ascii")
            pos += 1 + n
            tag = buf[pos : pos + 1]
            pos += 1
            if tag == b"i":
                v, pos = _read_varint(buf, pos)
                meta[key] = _unzigzag(v)
            elif tag == b"f":
                if pos + 8 > len(buf):
                    raise PayloadError("payload header is truncated")
                meta[key] = struct.unpack_from("<d", buf, pos)[0]
                pos += 8
            elif tag == b"s":
                n = buf[pos]
                meta[key] = buf[pos + 1 : pos + 1 + n].decode("ascii")
                pos += 1 + n
            else:
                raise PayloadError(f"payload header has unknown meta tag {tag!r}")
        if pos > len(buf):
            raise PayloadError("payload header is truncated")
        return codec, version, _DTYPES[dcode], tuple(shape), meta, pos
    except IndexError as exc:
        raise PayloadError("payload header is truncated") from exc
    except UnicodeDecodeError as exc:
        raise PayloadError("payload header is corrupt (non-ASCII name)") from exc


@dataclass(frozen=True, eq=False)
class Payload:
    """One encoded tensor: header fields plus the codec's body bytes.

    Attributes:
        codec: registered name of the compressor that produced it.
        version: that compressor's version (decoders refuse other versions).
        dtype: dtype of the original tensor; ``decompress`` returns it.
        shape: shape of the original tensor.
        data: the body, a contiguous 1-D ``uint8`` tensor on any device.
        meta: small decode-time settings (ints, floats, short strings), carried in the header.
    """

    codec: str
    version: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    data: torch.Tensor
    meta: Mapping[str, MetaValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.data.dtype != torch.uint8 or self.data.dim() != 1:
            raise TypeError(f"payload body must be a 1-D uint8 tensor, got {self.data.dtype} {tuple(self.data.shape)}")
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @cached_property
    def header(self) -> bytes:
        """The serialised header (counted in :attr:`nbytes`)."""
        return encode_header(self.codec, self.version, self.dtype, self.shape, self.meta)

    @property
    def body_nbytes(self) -> int:
        """Bytes of the codec body alone (what the papers' bit formulas count)."""
        return int(self.data.numel())

    @property
    def nbytes(self) -> int:
        """Exact wire size: ``len(self.to_bytes())``."""
        return len(self.header) + self.body_nbytes

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def to_bytes(self) -> bytes:
        """The whole message as it would cross the wire."""
        body = self.data.detach().to("cpu", copy=False).contiguous().numpy().tobytes()
        return self.header + body

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, device: torch.device | str = "cpu") -> Payload:
        """Restore a payload from :meth:`to_bytes` output; raises :class:`PayloadError` if corrupt."""
        buf = bytes(buf)
        codec, version, dtype, shape, meta, pos = decode_header(buf)
        body = torch.frombuffer(bytearray(buf[pos:]), dtype=torch.uint8) if len(buf) > pos else torch.empty(0, dtype=torch.uint8)
        return cls(codec, version, dtype, shape, body.to(device), meta)

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

Decoding is a trust boundary: the DDP hook decodes what its peers send.  :func:`decode_header`
checks every field (format version, lengths, canonical varints below 2^64, dtype code, at most
:data:`MAX_NDIM` dimensions, unique meta keys, known tags) and raises
:class:`~gcbench.core.errors.PayloadError` alone, whatever the bytes.  :func:`check_shape` bounds the
tensor a header may make its receiver allocate: the receiver's expected shape when it knows one
(the DDP hook's protocols and the simulated exchanges do, for every payload they decode),
otherwise at most :data:`MAX_NUMEL` elements and, where the decode is sized (the decoders pass
the message's wire size), at most :func:`decode_budget` bytes of decoded output for the message's
size (:data:`DECODE_FLOOR_BYTES`, or :data:`DECODE_BYTES_PER_WIRE_BYTE` per wire byte when that is
more), so a tiny message cannot make a receiver allocate gigabytes or loop for seconds before the
codec's own body checks run.  :meth:`Payload.from_bytes` only parses: it allocates the body it was
given and nothing the header declares, so it checks the structure (and the expected shape when
given) and leaves the size to the decode, where the receiver's expected shape is known.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from gcbench.core.errors import PayloadError

FORMAT_VERSION = 1

#: Most elements a payload header may declare when the receiver gives no expected shape (2^31:
#: 8 GiB of float32, beyond any single gradient tensor or bucket gcbench measures).
MAX_NUMEL = 2**31
#: Decoded bytes (see :func:`decode_nbytes`) any message may make a receiver allocate without an expected shape:
#: 16 MiB, 2M float32 elements of float32 output.  With the decoders' own temporaries (indices,
#: unpacked levels) a decode stays well below 64 MiB.
DECODE_FLOOR_BYTES = 16 << 20
#: Decoded bytes per wire byte (header included) beyond the floor, without an expected shape: 256 is
#: 32 float32 elements per byte, a 128x compression ratio over float32, so a 64 KiB message decodes
#: to at most 16 MiB.  A legitimate message can compress far more (a threshold payload of a bucket
#: whose entries are all below tau is its header alone): receivers that know the shape (every
#: protocol, the DDP hook) pass it and are bounded by it instead.
DECODE_BYTES_PER_WIRE_BYTE = 256
#: Most dimensions a header may declare (torch's own limit on tensor dimensions).
MAX_NDIM = 64

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
    """One LEB128 varint at ``pos``: (value, next position).  Values of 2^64 or more (more than ten
    bytes) are refused as overlong, and so are non-canonical encodings (a last byte of zero after a
    continuation): :func:`_varint` never writes them, and each message has one spelling."""
    n = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise PayloadError("payload header is truncated")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            if shift and not b:
                raise PayloadError("payload header has a non-canonical varint (a trailing zero byte)")
            if n >= 1 << 64:
                raise PayloadError("payload header has an overlong varint (2^64 or more)")
            return n, pos
        shift += 7
        if shift > 63:
            raise PayloadError("payload header has an overlong varint (more than ten bytes)")


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
    """Parse a header; returns (codec, version, dtype, shape, meta, body offset).

    Every field is checked for type and range (see the module docstring); anything malformed
    raises :class:`PayloadError` and nothing is allocated beyond the header's own few values.
    """
    if not buf:
        raise PayloadError("payload is empty")
    if buf[0] != FORMAT_VERSION:
        raise PayloadError(f"payload format version {buf[0]} is not supported (expected {FORMAT_VERSION})")
    pos = 1

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > len(buf):
            raise PayloadError(f"payload header is truncated (in the {what})")
        out = buf[pos : pos + n]
        pos += n
        return out

    def ascii_text(raw: bytes, what: str) -> str:
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise PayloadError(f"payload header is corrupt (non-ASCII {what})") from None

    codec = ascii_text(take(take(1, "codec name")[0], "codec name"), "codec name")
    version, pos = _read_varint(buf, pos)
    dcode, ndim = take(2, "dtype and ndim")
    if dcode >= len(_DTYPES):
        raise PayloadError(f"payload has unknown dtype code {dcode} (known: 0..{len(_DTYPES) - 1})")
    if ndim > MAX_NDIM:
        raise PayloadError(f"payload header declares {ndim} dimensions (at most {MAX_NDIM})")
    shape = []
    for _ in range(ndim):
        s, pos = _read_varint(buf, pos)
        shape.append(s)
    nmeta = take(1, "meta count")[0]
    meta: dict[str, MetaValue] = {}
    for _ in range(nmeta):
        key = ascii_text(take(take(1, "meta key")[0], "meta key"), "meta key")
        if key in meta:
            raise PayloadError(f"payload header repeats meta key {key!r}")
        tag = take(1, "meta tag")
        if tag == b"i":
            v, pos = _read_varint(buf, pos)
            meta[key] = _unzigzag(v)
        elif tag == b"f":
            meta[key] = struct.unpack("<d", take(8, "meta value"))[0]
        elif tag == b"s":
            meta[key] = ascii_text(take(take(1, "meta value")[0], "meta value"), "meta value")
        else:
            raise PayloadError(f"payload header has unknown meta tag {tag!r} (known: b'i', b'f', b's')")
    return codec, version, _DTYPES[dcode], tuple(shape), meta, pos


def decode_nbytes(numel: int, dtype: torch.dtype) -> int:
    """Bytes a decode of ``numel`` elements allocates for its result: the float32 decode plus the cast to ``dtype``.

    What :func:`check_shape` bounds; a codec's own temporaries are a small multiple of it.
    """
    return numel * (4 + dtype.itemsize)


def decode_budget(wire_nbytes: int) -> int:
    """Most :func:`decode_nbytes` a message of ``wire_nbytes`` bytes may demand without an expected shape."""
    return max(DECODE_FLOOR_BYTES, DECODE_BYTES_PER_WIRE_BYTE * wire_nbytes)


def check_shape(shape: tuple[int, ...], expected_shape: tuple[int, ...] | torch.Size | None = None,
                wire_nbytes: int | Callable[[], int] | None = None, dtype: torch.dtype = torch.float32) -> None:
    """Raise :class:`PayloadError` unless a receiver may decode a header's ``shape``.

    With ``expected_shape`` (the receiver knows what it waits for) the shapes must be equal.
    Without it, the declared element count is at most :data:`MAX_NUMEL` (no dimension alone above
    it, so an empty tensor cannot hide an absurd one) and, when the message's ``wire_nbytes`` is
    given (an int, or a callable computing it, called only for a decode above
    :data:`DECODE_FLOOR_BYTES`), its :func:`decode_nbytes` in ``dtype`` is at most
    :func:`decode_budget` of it.  Runs before anything is allocated.
    """
    if expected_shape is not None:
        want = tuple(int(s) for s in expected_shape)
        if tuple(shape) != want:
            raise PayloadError(f"payload declares shape {tuple(shape)}, the receiver expects {want}")
        return
    if len(shape) > MAX_NDIM:
        raise PayloadError(f"payload declares {len(shape)} dimensions (at most {MAX_NDIM})")
    numel = 1
    for s in shape:
        if s < 0 or s > MAX_NUMEL:
            raise PayloadError(f"payload declares a dimension of {s} (at most {MAX_NUMEL} without an expected shape)")
        numel *= s
    if numel > MAX_NUMEL:
        raise PayloadError(f"payload declares {numel} elements, shape {tuple(shape)} (at most {MAX_NUMEL} without an expected shape)")
    need = decode_nbytes(numel, dtype)
    if wire_nbytes is not None and need > DECODE_FLOOR_BYTES:
        n = wire_nbytes() if callable(wire_nbytes) else wire_nbytes
        if need > decode_budget(n):
            raise PayloadError(f"payload of {n} bytes declares {numel} {str(dtype).removeprefix('torch.')} elements, shape "
                               f"{tuple(shape)}: {need} bytes to decode, more than {decode_budget(n)} for its size; pass the "
                               "expected shape to decode such a message")


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
        if type(self.shape) is not tuple or any(type(s) is not int for s in self.shape):  # a torch.Size, numpy ints
            object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @classmethod
    def trusted(cls, codec: str, version: int, dtype: torch.dtype, shape: tuple[int, ...], data: torch.Tensor,
                meta: Mapping[str, MetaValue] | None = None) -> Payload:
        """A payload built without :meth:`__post_init__`'s checks, for a caller that guarantees them.

        ``data`` must be a 1-D ``uint8`` tensor and ``shape`` a tuple of ints.  A compressor that
        emits one payload per tensor of a whole step (the cast compressors' grouped path) saves the
        frozen dataclass's five ``object.__setattr__`` calls and the checks: about 4 µs a tensor,
        6% of a copy of ResNet-18's 62 gradients.
        """
        p = object.__new__(cls)
        p.__dict__.update(codec=codec, version=version, dtype=dtype, shape=shape, data=data, meta={} if meta is None else meta)
        return p

    @classmethod
    def sliced(cls, codec: str, version: int, dtype: torch.dtype, shape: tuple[int, ...], buffer: torch.Tensor, start: int,
               stop: int) -> Payload:
        """A trusted payload (:meth:`trusted`) whose body is ``buffer[start:stop]`` of a 1-D ``uint8`` buffer, sliced
        the first time :attr:`data` is read.

        The cast compressors encode a whole step into one buffer; slicing 161 bodies out of it cost as
        much as making the payloads (about 1.7 µs a view), work a compress timed alone did for
        bodies nobody had read yet.  The bytes are written when the payload is made; only the view is deferred.
        """
        p = object.__new__(cls)
        p.__dict__.update(codec=codec, version=version, dtype=dtype, shape=shape, meta={}, _slice=(buffer, start, stop))
        return p

    def __getattr__(self, name: str) -> torch.Tensor:
        # only called when normal lookup fails: the deferred body of a :meth:`sliced` payload
        if name == "data":
            sl = self.__dict__.get("_slice")
            if sl is not None:
                buf, start, stop = sl
                data = self.__dict__["data"] = buf[start:stop]
                return data
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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

    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape)

    def to_bytes(self) -> bytes:
        """The whole message as it would cross the wire."""
        body = self.data.detach().to("cpu", copy=False).contiguous().numpy().tobytes()
        return self.header + body

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, device: torch.device | str = "cpu", *,
                   expected_shape: tuple[int, ...] | torch.Size | None = None) -> Payload:
        """Restore a payload from :meth:`to_bytes` output; raises :class:`PayloadError` if corrupt.

        ``expected_shape`` is the shape the receiver waits for: a header declaring another raises
        before anything is allocated.  Without it the header's shape is checked for structure only
        (at most :data:`MAX_NUMEL` elements): parsing allocates the body it was given and nothing
        the header declares, and the decode bounds its output (:func:`check_shape` with the wire
        size, or the receiver's expected shape).
        """
        buf = bytes(buf)
        codec, version, dtype, shape, meta, pos = decode_header(buf)
        check_shape(shape, expected_shape)
        body = torch.frombuffer(bytearray(buf[pos:]), dtype=torch.uint8) if len(buf) > pos else torch.empty(0, dtype=torch.uint8)
        return cls(codec, version, dtype, shape, body.to(device), meta)


DENSE_BYTES_PER_ELEMENT = 4  # the uncompressed size: ratios are against float32, as the papers count


def dense_bytes(numel: float) -> int:
    """Bytes of the uncompressed float32 tensor(s)."""
    return DENSE_BYTES_PER_ELEMENT * int(numel)

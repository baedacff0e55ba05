"""Reference points without information loss beyond a cast: ``none`` (fp32), ``fp16``, ``bf16``.

``none`` sends the tensor as float32 (32·d bits) and is the dense baseline every ratio is
measured against; ``fp16``/``bf16`` cast to 16 bits (16·d bits).  Values beyond fp16's range
become ±inf, exactly as a real fp16 all-reduce would produce.
"""

from __future__ import annotations

import torch

from gcbench.compressor import Compressor, State
from gcbench.payload import Payload
from gcbench.registry import register


class _Cast(Compressor):
    wire_dtype: torch.dtype = torch.float32

    def _encode(self, a: torch.Tensor, state: State):
        wire = a.reshape(-1).to(self.wire_dtype, copy=self.wire_dtype == torch.float32)
        return wire.view(torch.uint8), {}, None

    def _decode(self, payload: Payload) -> torch.Tensor:
        data = payload.data
        esize = torch.empty(0, dtype=self.wire_dtype).element_size()
        if data.numel() != esize * payload.numel:
            from gcbench.errors import PayloadError

            raise PayloadError(f"{self.name} body has {data.numel()} bytes, expected {esize * payload.numel}")
        # copy=True: for float32 ``.float()`` would return a view of the payload body, and a caller
        # modifying the decoded tensor in place would silently change the payload's bytes
        return data.view(self.wire_dtype).to(torch.float32, copy=True)


@register(
    name="none",
    version=1,
    description="identity: the dense float32 tensor (the baseline of every ratio)",
    paper="—",
    biased=False,
    stateful=False,
)
class NoCompression(_Cast):
    wire_dtype = torch.float32


@register(
    name="fp16",
    version=1,
    description="cast to IEEE half precision (16 bits per element)",
    paper="— (mixed-precision communication)",
    biased=True,
    stateful=False,
)
class Fp16(_Cast):
    wire_dtype = torch.float16


@register(
    name="bf16",
    version=1,
    description="cast to bfloat16 (16 bits per element, fp32 range)",
    paper="— (mixed-precision communication)",
    biased=True,
    stateful=False,
)
class Bf16(_Cast):
    wire_dtype = torch.bfloat16

"""Fast CPU kernels: pure array operations (NumPy, torch, numba), one module per operation.

Why this package exists (docs/timing.md has the measurements): on a 25.6M-element tensor a copy
costs 7.5–9 ms, while ``torch.rand_like`` costs 120 ms, every new 100 MB result 35–55 ms of page
faults, and an eager chain of elementwise torch ops one pass (and often one allocation) per op.
The kernels here read the input once or twice, draw their random numbers inside the same loop
and write the packed wire bits directly.

* :mod:`~gcbench.kernels.runtime` — the kernel switch (``GCBENCH_KERNELS``), the numba import, the
  thread policy (dense kernels: numba prange; sparse item kernels: a small Python pool) and the one serial cut-off, views.
* :mod:`~gcbench.kernels.buffers` — the one allocator: huge-page output buffers with a small reuse pool.
* :mod:`~gcbench.kernels.rng` — counter-based SplitMix64 numbers and random k-subsets.
* :mod:`~gcbench.kernels.bits` — bit-field packing and reading, record streams.
* :mod:`~gcbench.kernels.stats` — max, norms, std, the fidelity sums.
* :mod:`~gcbench.kernels.select` — threshold counts and the selection write pass.
* :mod:`~gcbench.kernels.topk` — the one exact top-k.
* :mod:`~gcbench.kernels.scatter` — gathers, scatters and the fused sparse decode scatter.
* :mod:`~gcbench.kernels.sign`, :mod:`~gcbench.kernels.quantizers` — sign/1-bit, TernGrad, QSGD,
  natural compression and dithering.
* :mod:`~gcbench.kernels.momentum`, :mod:`~gcbench.kernels.adacomp` — DGC/SDAGC momentum, AdaComp.
* :mod:`~gcbench.kernels.lowprec` — block-scaled low-precision element formats (fp8, fp4, int2–int8).

Each operation has its plain reference beside it (``*_reference`` or ``*_torch``, or the
compressor's torch path named in its docstring); ``tests/kernels/`` checks fast == reference and
that results do not depend on the thread count.  This package imports no payload, codec or
compressor code: it sits below :mod:`gcbench.core`.
"""

from gcbench.kernels.adacomp import adacomp_bin_stats, adacomp_decode, adacomp_encode
from gcbench.kernels.bits import BitWriterSides, as_words, pack_fields, pack_into, read_fixed, unpack_fields, write_fields, write_records
from gcbench.kernels.buffers import empty, empty_f32_tensor, empty_maybe_zero, prefault, zeros, zeros_f32
from gcbench.kernels.momentum import momentum_sample, momentum_update_count, momentum_update_std
from gcbench.kernels.quantizers import (
                                        dither_decode,
                                        dither_fields,
                                        dither_pack,
                                        dither_values,
                                        natural_decode,
                                        natural_encode,
                                        qsgd_decode,
                                        qsgd_encode,
                                        qsgd_fields,
                                        qsgd_norms,
                                        qsgd_plan,
                                        qsgd_scatter,
                                        terngrad_codes,
                                        terngrad_decode,
)
from gcbench.kernels.rng import (
                                        key_of,
                                        normals_torch,
                                        paired_uniforms,
                                        rand24,
                                        rand24_pairs,
                                        rand24_pairs_reference,
                                        rand24_pairs_torch,
                                        rand24_reference,
                                        rand24_torch,
                                        random_subset,
                                        random_subset_reference,
                                        random_subset_torch,
                                        seed_word,
                                        subset_params,
                                        uniforms,
)
from gcbench.kernels.runtime import (
                                        KERNEL,
                                        KERNEL_MODES,
                                        NUMBA,
                                        PARALLEL,
                                        PART,
                                        SERIAL_MAX,
                                        as_numpy,
                                        available,
                                        cpu_fast,
                                        fast_cpu,
                                        flat_f32,
                                        fused_ef_ok,
                                        kernel_mode,
                                        launches,
                                        n_chunks,
                                        njit,
                                        prange,
                                        run_chunks,
                                        run_parallel,
                                        workers,
)
from gcbench.kernels.scatter import gather, scatter, scatter_sub, scatter_zero, unpack_scatter
from gcbench.kernels.select import ZERO_NONE, ZERO_SET, ZERO_SUB, add_count, count_chunks, f32_threshold, select_write
from gcbench.kernels.sign import ef_sign_apply, ef_sign_form, onebit_apply, onebit_decode, onebit_form, sign_pack, sign_unpack
from gcbench.kernels.stats import (
                                        MOMENT_BLOCK,
                                        absmax,
                                        accumulate,
                                        first_sum_sq,
                                        l2norm,
                                        moments,
                                        population_std,
                                        sq_dist,
                                        sq_norm,
                                        std_and_absmax,
)
from gcbench.kernels.topk import (
                                        kth_largest_np,
                                        topk_collect,
                                        topk_count,
                                        topk_select,
                                        topk_select_reference,
                                        topk_select_torch,
                                        topk_select_torch_exact,
                                        topk_tensor,
)

__all__ = [
    "KERNEL", "KERNEL_MODES", "MOMENT_BLOCK", "NUMBA", "PARALLEL", "PART", "SERIAL_MAX", "ZERO_NONE", "ZERO_SET", "ZERO_SUB",
    "BitWriterSides", "absmax", "accumulate", "adacomp_bin_stats", "adacomp_decode", "adacomp_encode", "add_count", "as_numpy",
    "as_words", "available", "count_chunks", "cpu_fast", "dither_decode", "dither_fields", "dither_pack", "dither_values",
    "ef_sign_apply", "ef_sign_form", "empty", "empty_f32_tensor", "empty_maybe_zero", "f32_threshold", "fast_cpu", "first_sum_sq",
    "flat_f32", "fused_ef_ok", "gather", "kernel_mode", "key_of", "kth_largest_np", "l2norm", "launches", "moments",
    "momentum_sample", "momentum_update_count", "momentum_update_std", "n_chunks", "natural_decode", "natural_encode", "njit",
    "normals_torch", "onebit_apply", "onebit_decode", "onebit_form", "pack_fields", "pack_into", "paired_uniforms", "population_std",
    "prange", "prefault", "qsgd_decode", "qsgd_encode", "qsgd_fields", "qsgd_norms", "qsgd_plan", "qsgd_scatter", "rand24",
    "rand24_pairs", "rand24_pairs_reference", "rand24_pairs_torch", "rand24_reference", "rand24_torch", "random_subset",
    "random_subset_reference", "random_subset_torch", "read_fixed", "run_chunks", "run_parallel", "scatter", "scatter_sub",
    "scatter_zero", "seed_word", "select_write", "sign_pack", "sign_unpack", "sq_dist", "sq_norm", "std_and_absmax", "subset_params",
    "terngrad_codes", "terngrad_decode", "topk_collect", "topk_count", "topk_select", "topk_select_reference", "topk_select_torch",
    "topk_select_torch_exact", "topk_tensor", "uniforms", "unpack_fields", "unpack_scatter", "workers", "write_fields",
    "write_records", "zeros", "zeros_f32",
]

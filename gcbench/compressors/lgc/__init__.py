"""LGC — Learned Gradient Compression (Abrahamyan, Chen, Bekoulis & Deligiannis, IEEE TNNLS 2021).

**RECONSTRUCTED.**  The paper's body and any official code are not public here.  The sources, and
what each one gives (every detail below is tagged with one of them):

* **[abstract]** the abstracts of the TNNLS paper (doi:10.1109/TNNLS.2021.3084806) and of its
  EUSIPCO 2021 precursor: gradients of different workers are correlated, and LGC exploits this
  inter-node redundancy with an autoencoder, trained during the first stages of training, that
  captures the information common to the workers' gradients so it is not sent repeatedly; the
  autoencoder is a lightweight network; there are two instances, one for the parameter-server
  protocol and one for ring-allreduce (the EUSIPCO paper has the parameter-server one only);
  ResNet-101 on CIFAR-10 reaches 93.57% top-1, 0.18 points below uncompressed training.
* **[re-impl]** a third-party re-implementation whose docstrings cite the TNNLS DOI (read, not
  copied): three stages of 200 and 300 rounds then the rest; per-layer top-k at 1e-3 and innovation
  at 1e-5; the first parameter tensor and the last two of a ResNet (two and two of a VGG) dense;
  ONE autoencoder over the whole model's concatenated top-k values; its layers (see
  :mod:`gcbench.compressors.lgc.autoencoder`); one decoder per worker with the innovation concatenated as
  a channel at full length; loss 0.5·Σ_w MSE(decoded_w, values_w) + 0.5·Σ_{i≠j} MSE(z_i, z_j),
  every decoder fed the latent of one randomly chosen worker; plain SGD, lr 1e-3, one step per
  round, trained by the server in stage 2 and frozen after; the encoder sent to the leader
  (worker 0) once at the start of stage 3; the leader's message = latent + innovation + per-layer
  indices, the others' = innovation; error feedback with the residual zeroed where sent.
* **[gcbench]** gcbench's own choices, made where the sources are silent or to measure fairly.
* **[inferred]** how the ring-allreduce instance works (``mode="ring"``): the TNNLS abstract says it
  exists; nothing public describes it.  gcbench infers it from the leader idea: a rotating leader
  (``step mod N``; CLT-k, which only cites LGC, rotates its leader the same way) broadcasts its
  index set, every worker encodes its own values there, a ring all-reduce sums the latents, and
  one decoder maps the mean latent to the aggregate.

It is registered with ``reconstructed=True`` and ``min_workers=2``: LGC is defined only by its
multi-worker exchange.  Two presets (``preset``), each labelled in ``gcbench list`` and results:

``preset="reference"`` — follows [re-impl] as far as it goes, exchanging the whole model at once
(:meth:`LGC.exchange_group`):

* phases 200 dense / 300 training steps [re-impl] (suites shorten them with ``dense_steps`` and
  ``train_steps``); top-k ``density`` 1e-3 per tensor, innovation 1e-5 per tensor [re-impl];
* the first ``dense_first`` = 1 and last ``dense_last`` = 2 tensors dense fp32 in every phase
  [re-impl, its ResNet rule; applied to every model by gcbench]; they stay out of the autoencoder
  and are exact [gcbench: the re-impl also routes them through its autoencoder vector];
* phase 2: every other ("middle") tensor top-k with error feedback; the server trains the
  re-impl's autoencoder on each worker's own top-k values, concatenated in tensor order, with the
  re-impl's loss and SGD step [re-impl]; the innovation channel holds the worker's k_inn largest
  values at their positions in that vector [gcbench: the re-impl re-selects a top-k of the
  innovation tensor, whose positions do not line up with the values'];
* phase 3, ps: the leader sends the latent of its concatenated top-k values (fp32, about K/4
  floats, no scaling [re-impl]), its indices (each tensor's coded into that tensor's size, one
  message [gcbench: the re-impl sends int64 tensors]) and its innovation; the others their
  innovation; the server decodes worker w with w's decoder from the leader's latent and w's
  innovation at its positions in the leader's index set [re-impl; the alignment gcbench's], adds w's innovation outside
  that set exactly [gcbench], averages, and sends the aggregate back;
* phase 3, ring [inferred]: as below, with the re-impl's encoder and one decoder trained on the
  mean latent → mean values (at the leader's indices, gathered as in ``preset="gcbench"``);
* if the middle tensors' K totals less than 31 (the encoder's shortest input) they keep top-k+EF
  in phase 3 [gcbench].

``preset="gcbench"`` (default) — gcbench's design, each tensor on its own (:meth:`LGC.exchange`):

1. ``dense`` — the first ``dense_steps`` steps (default 20 [gcbench: compressed from the re-impl's
   200 so a short benchmark reaches phase 3]): uncompressed fp32.
2. ``topk`` — the next ``train_steps`` steps (default 60 [gcbench; re-impl 300]): every worker
   sends its own top-k (``density`` of each tensor, 1e-3 [re-impl]) with error feedback, while a
   small 1-D convolutional autoencoder (:mod:`gcbench.compressors.lgc.autoencoder`) is trained online on
   the workers' values at the leader's top-k indices with its own seeded Adam optimizer [gcbench].
3. ``compressed`` — the autoencoder is frozen and used:

   * ``mode="ps"`` (parameter server, default [abstract]; the message layout [re-impl]): the leader
     (worker 0) sends the latent code of its top-k values, its top-k indices and its innovation; the server
     forwards the indices to the other workers, and each of them sends only its innovation.  The
     server decodes every worker's values at the leader's indices from the leader's latent plus
     that worker's innovation (an extra decoder input) and averages; it sends the aggregate back.
   * ``mode="ring"`` [inferred]: a rotating leader (``step mod N``) broadcasts its index set along
     the ring; every worker encodes its own values at those indices with the shared encoder; the
     latents are summed by a ring all-reduce and one decoder maps the mean latent to the aggregate.

Choices of ``preset="gcbench"`` (all [gcbench] unless tagged):

* **One autoencoder per tensor**, not one per model as in [re-impl], so every tensor is measured
  alike with the granularity the suite names.
* **Values and windows.**  The autoencoder sees the K = ceil(density·d) values at the leader's
  top-k indices, in index order (neighbouring weights stay neighbours for the convolutions).  K
  is split into n = ceil(K / ``window``) equal windows of ``per = ceil(K/n)`` values, each padded
  with zeros to a multiple of 16 (``L``; 16 = 2^4 for the four stride-2 layers, so every stride
  divides); padding is excluded from the loss.  Windows keep the network small and CPU-trainable
  for any K.  Each window is divided by the leader's RMS of that window (one fp32 *scale* per
  window, sent with the latent), so one network serves layers and steps of any magnitude; a
  zero scale decodes to zeros (an all-zero gradient gives an all-zero aggregate).
* **Latent.**  4 channels [re-impl] × L/16 per window, sent as fp32: ``n·(4·L/16 + 1)`` floats
  with the scales ("latent floats" below).
* **Innovation.**  A worker's innovation [re-impl] is its k_inn = ceil(``innovation_density``·d)
  largest |values| over the whole tensor (1e-5 [re-impl]), sent exactly (fp32 value + index into
  d).  Those inside the leader's index set enter the decoder as its extra input (folded into 16
  channels at the latent's resolution; the re-impl concatenates it at full length after
  upsampling) and are kept exactly in its output; those outside are added to that worker's
  reconstruction directly.  Ring mode has none.
* **Decoders.**  One shared decoder (``decoders="shared"``), the encoder's mirror, or one per
  worker (``decoders="per-worker"``, the re-impl's layout; ps only).
* **Loss** (phase 2, ``latent_weight`` λ = 0.5 [re-impl's weights]): (1 − λ)·reconstruction MSE +
  λ·latent pull, where the pull is mean‖z_w − z̄‖² / mean‖z̄‖² (relative, so the encoder cannot
  satisfy it by shrinking its codes; the re-impl's is the absolute Σ_{i≠j} MSE(z_i, z_j)).  PS:
  each worker's values reconstructed *from the leader's latent* and its own innovation, by its
  decoder — exactly what the server does in phase 3, so the decoder is trained as it is used
  (gcbench v1 decoded each worker from its own latent and the trained decoder then did worse than
  an untrained one).  Ring: the mean of the workers' values reconstructed from the mean latent,
  exactly what phase 3 does.  ``ae_iters`` = 8 Adam steps (lr ``ae_lr`` = 1e-3 [re-impl's lr])
  per training exchange, on that step's data (the re-impl: one SGD step).
* **Training data and where training runs, with their traffic counted.**  The trainer needs every
  worker's values at the leader's indices.  In phase 2 it already has each worker's own top-k; a
  non-leader additionally sends its values at the leader's indices that are not in its own top-k
  (fp32, no indices: both sides know both index sets; traffic phase ``topk:train``).  PS: the
  server trains [re-impl] (and sends the leader's indices to the other workers); at the first
  compressed step it sends the encoder weights to the leader once (``setup:weights`` [re-impl]).
  Ring: the leader's indices arrive with the all-gather, the extra values are all-gathered, and
  every worker trains an identical replica (same data, same seed), so no weights move.
* **Error feedback** (mandatory; ``state.tensors["residual"]``): phases 1–2 as usual (a dense
  step leaves no residual).  In phase 3 a worker cannot run the server's decoder, so the values
  at the leader's indices (and its innovation) count as sent: the residual is zeroed there and
  the autoencoder's reconstruction error is not fed back (both presets; the re-impl zeroes each
  worker's residual at its own last top-k mask).
* **Small tensors.**  A tensor whose K is below ``min_k`` (default 64: biases, tiny layers) keeps
  plain top-k with error feedback in phase 3 and trains no autoencoder — a ~350k-parameter network
  per 64-element bias would cost more than it saves.
* The autoencoder of a tensor (or, with ``preset="reference"``, of the model) lives in the state
  of worker 0 (``states[0].values["lgc"]``; the model's in its first unit's state: weights,
  optimizer state, a flag for the one-time weight transfer) as plain tensors and numbers, so
  ``state_dict()``/``load_state_dict()`` round-trips it and the next exchange is bit-identical.
  It runs in fp32 on the gradients' device (created on the CPU from its seed, moved there at first
  use).  Phase and leader derive from ``state.step``.

Transports [gcbench].  ``preset="gcbench"`` is written once, as each worker's side
(:meth:`LGC.worker_protocol`, legs of :mod:`gcbench.core.protocol`): the parameter server's rounds
are :class:`~gcbench.core.protocol.ToServer` legs, hosted by rank 0 (the ps leader, whose unit
state holds the autoencoder), and ring mode's messages (the ring all-reduces of fp32 chunk
payloads, the ring broadcast of the leader's indices, the all-gathers) are
:class:`~gcbench.core.protocol.Send` legs.  :meth:`LGC.exchange` runs it on the simulated
transport, the DDP hook on ``torch.distributed``, with the same bytes counted per message.  So is
the reference preset's whole-model exchange: :meth:`LGC.worker_protocol` over every tensor of the
model (:attr:`LGC.needs_whole_model`), run by :meth:`LGC.exchange_group` on the simulated transport
and by the hook once per step over all its buckets.

Device [gcbench].  Every message body is built and read with torch operations on the gradients'
device (:mod:`gcbench.core.codec_torch`, the same bytes as the host codecs), and the autoencoder,
the windows and the server's decode run there too: a GPU exchange makes no host copy.  Its scalar
reads are the sparse codec's (one folded validity check per top-k body decoded, each decoded once
per step; the card says ``scalar_reads=1``).

Single-tensor API (the registry contract): ``compress(x, state)`` is the worker's standalone
payload for its phase — fp32 dense in phase 1, top-k with error feedback in phases 2 and 3 (a
phase-3 innovation cannot decode without the leader's latent; the reference preset's dense-tensor
rule needs the model's tensor list, so it applies in the exchange only).  Header ``kind`` tells
payloads apart: ``dense`` and ``topk`` decode from the payload alone; ``latent``, ``indices``,
``innovation``, ``values`` and ``weights`` are protocol messages that decode only inside the
exchange, and :meth:`LGC.decompress` says so.

Body bits per worker and step, ``preset="gcbench"`` (fixed index coding, b_d = ceil(log2 d)):
dense 32·d; topk K·(32 + b_d) (+ 32 per missing value in ``topk:train``); compressed PS leader
32·latent floats + K·b_d + k_inn·(32 + b_d), other workers k_inn·(32 + b_d) only; ring: the
leader's broadcast 32·n + K·b_d and 2(N−1)/N of 32·(latent floats − n) in all-reduce chunks.
``preset="reference"``: the dense tensors 32·d each in every phase (ring: 2(N−1)/N of it), plus
for the middle tensors — topk Σ K_u·(32 + b_u); compressed PS leader 32·4·L4 + Σ K_u·b_u + Σ
k_inn_u·(32 + b_u), others Σ k_inn_u·(32 + b_u).  Every message is a real
:class:`~gcbench.core.payload.Payload`; its ``nbytes`` (header included) is what the traffic counts and
its ``body_nbytes`` the body-only count.  :func:`phase_summary` turns a run of exchanges into
per-phase and amortised ratios.

Paper claim (for reference, [abstract]): ResNet-101 on CIFAR-10 reaches 93.57%, 0.18 points below
uncompressed.

The package, one responsibility a module: ``contract.py`` (the :class:`LGC` compressor: the
single-tensor contract, the schedule, the autoencoder record), ``preset.py`` (the presets'
common interface), ``gcbench_preset.py`` and ``reference_preset.py`` (the two presets, as
strategy objects :class:`LGC` delegates to), ``rounds.py`` (the exchange steps both run),
``wire.py`` (the payload bodies), ``windows.py``, ``index_sets.py``, ``autoencoder.py`` (the
networks) and ``summary.py`` (:func:`phase_summary`).
"""

from __future__ import annotations

from gcbench.compressors.lgc import autoencoder as ae
from gcbench.compressors.lgc.contract import LGC, PHASES, LGCExchangeResult
from gcbench.compressors.lgc.index_sets import topk_indices_sorted
from gcbench.compressors.lgc.summary import phase_summary
from gcbench.compressors.lgc.windows import Windows
from gcbench.core.protocol import SERVER

__all__ = ["LGC", "PHASES", "SERVER", "LGCExchangeResult", "Windows", "ae", "phase_summary", "topk_indices_sorted"]

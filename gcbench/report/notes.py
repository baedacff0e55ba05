"""The notes, legends and footnotes under the report's tables: every definition a reader needs, written once.

The terminal prints the short :data:`LEGEND`; the Markdown and HTML reports print :data:`FOOTNOTE` in
full (docs/metrics.md and docs/timing.md).  Column headers that the notes
name (:data:`X_COPY_HEADER`) live here too, so a note and its column cannot disagree.
"""

from __future__ import annotations

from gcbench.measure.bench import BENCH_BUDGET_S, BENCH_MAX_ROUNDS
from gcbench.measure.timing import TimingPolicy
from gcbench.results.record import BEATS_BOUND, CUT_SHORT, TOO_SHORT, UNSTABLE

#: the mark of a reconstructed compressor (its paper's body was unavailable) after its name in every table
DAGGER = "†"

#: the one name of a kernel's time over the copy's time (lower is better) in every table: run, compare, bench
X_COPY_HEADER = "comp ×copy"
X_COPY_DEC_HEADER = "dec ×copy"


COMPARE_STREAM_NOTE = ("delivered update = 1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after the last step (U: the case's update, D: the "
                       "dense update on the true worker mean), ± its 95% interval (t × the jackknife standard error over the workers, "
                       "each left out in turn; none where the aggregate is not the workers' mean); per-step error = mean over steps of "
                       "‖U_t − D_t‖²/‖D_t‖²; scale-free = 1 − cos²(U_t, D_t).")


ONE_SHOT_NOTE = ("One compression of one gradient, R repeats, on the first steps only; each case against its own reference "
                 "(DGC and SDAGC against their momentum-SGD update), so these rows rank cases only where the references agree.")


PHASE_NOTE = ("Per phase: the phases of the suite's phased compressor (LGC); every case of the source is measured over "
              "the same steps of the same gradient stream. ratio = dense fp32 bytes / bytes a worker sends per step in the "
              "phase (every message counted, payload headers included); body ratio = the same with payload bodies only (headers "
              "excluded, as papers count: on LGC's small compressed-phase messages headers are a large share); "
              "agg q = mean over the phase's steps of ‖aggregate − true mean‖²/‖true mean‖²; "
              "drift = ‖Σ(aggregate − mean)‖/‖Σ mean‖ summed over the phase's steps (what error feedback eventually "
              "delivers: compare compressors at equal drift); Σ drift (end) = the same over the whole run; errors are against "
              "each compressor's own reference (momentum SGD's update for DGC); run ratio = dense bytes × steps / every byte "
              "a worker sent in the run (what the server sends — aggregates, LGC's one-time encoder transfer — is received, "
              "not sent).")


WORKER_NOTE = ("Mean bytes per step, by worker, of the phased cases (one-time set-up messages excluded): LGC's parameter-server "
               "leader (w0) sends its latent, indices and innovation, the others their innovation only.")


LAYER_NOTE = ("Per layer: one row per unit the compressor saw (a layer, or a bucket at bucket granularity), the cases in "
              "column pages; the last row is the whole model (the summary table's number); — = no value for that case.")


_POLICY = TimingPolicy()


TIMING_NOTE = (f"{X_COPY_HEADER} = compress time / the time of a plain copy of the same tensors (×copy: lower is better; 1× = as "
               f"fast as a copy), the copy timed in rounds interleaved with each case's kernels, pooled over every case of "
               f"the source for a compute-bound kernel, its own rounds' for one within 2× of its traffic bound: median over "
               f"rounds ± half the interquartile "
               f"range; ({UNSTABLE}) = the median's 95% CI is still wider than ±{_POLICY.unstable_rel_ci:.0%} of it after "
               f"the rounds calibration took (more rounds until it is within ±{_POLICY.stable_rel_ci:.0%}, up to a cap), the "
               f"case's own copy drifted from the pooled one enough to move the kernel by over {_POLICY.copy_drift:.0%}, or "
               f"other processes took over {_POLICY.foreign_cpu:.0%} of the machine's CPU while timing (the 1-minute load per "
               f"core over {_POLICY.load_per_core:g} where that cannot be read); ({TOO_SHORT}) = median under "
               f"{1e6 * _POLICY.resolution_s:.0f} µs; ({BEATS_BOUND}) = faster than the memory traffic the compressor's card "
               "says it must do, so no speed is shown.")


STREAM_NOTE = ("Main table, on the suite's common reference (the dense update D_t of the suite's optimizer on the true worker "
               "mean): delivered = 1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after the last step, U_t the update the case applies "
               "(1 = all of the dense update arrived, ≤ 0 = no better than sending nothing), ± its 95% interval (t × the "
               "jackknife standard error over the workers, each left out in turn); workers' own (detail table) = 95% CI "
               "of the mean of each worker's own delivered fraction, its own compressed stream against its own dense update "
               "(another quantity: the aggregate of several workers' sparse updates can deliver more than any one); "
               "step err = mean over steps of "
               "‖U_t − D_t‖²/‖D_t‖² (≥ 1 = no better than sending nothing); scaled err = the same after the best scalar "
               "rescaling (1 − cos²), so a compressor is not penalised for its scale alone.")


ONESHOT_NOTE = ("One-shot table, each case against its own reference: q = relative MSE ‖C(x)−x‖²/‖x‖² (whole model, "
                "energy-weighted); q scaled = 1 − cos²; bias² from R compressions; cosine whole model; agg q = exchanged "
                "aggregate vs the true worker mean.")


#: every definition the run tables need, in full: the Markdown and HTML reports print it under their tables
FOOTNOTE = f"{STREAM_NOTE} {ONESHOT_NOTE} {TIMING_NOTE} {DAGGER} = reconstructed definition (paper body unavailable)."


#: the terminal's short legend under the run tables: what each mark means, and where the full definitions are (FOOTNOTE
#: in --md and --html, `gcbench list metrics`, docs/metrics.md) — a wall of text under 60 rows is not read
LEGEND = ("Legend: delivered = fraction of the dense update (the common reference) that arrived, 1 = all, ≤ 0 = no better "
          "than sending nothing, ± its 95% interval (jackknife over workers), (short) = too few "
          "steps to rank on; step err / scaled err = mean "
          "per-step error, raw / after the best rescaling (≥ 1 = no better than nothing); one-shot table: each case against "
          f"its own reference; {X_COPY_HEADER} = compress time / copy time, lower is better, ± half the IQR (1 round: "
          "no spread); "
          f"({UNSTABLE}), ({TOO_SHORT}), ({BEATS_BOUND}), ({CUT_SHORT}: the run's timing budget) = not a speed to act on; "
          f"{DAGGER} = reconstructed definition. "
          "Full definitions: gcbench report --md, `gcbench list metrics`, docs/metrics.md and docs/timing.md.")


TRAIN_FOOTNOTE = ("gap = final accuracy of 'none' minus this compressor's, in percentage points; to target = training time until "
                  "the held-out accuracy first reached the target (checked at epoch ends); step ms = median step time = compute + "
                  "compress + comm + decomp; MB/worker = payload bytes one worker sent over the whole run.")


BENCH_FOOTNOTE = (f"{X_COPY_HEADER} / {X_COPY_DEC_HEADER} = compress / decompress time as a multiple of a plain copy of the "
                  "same tensor into a "
                  "preallocated buffer, the two interleaved round by round in one process per case: median over rounds ± half "
                  f"the interquartile range, over at least --rounds rounds and more until the median's 95% CI is within "
                  f"±{_POLICY.stable_rel_ci:.0%} (at most {BENCH_MAX_ROUNDS} rounds or {BENCH_BUDGET_S:g} s per kernel); "
                  f"({UNSTABLE}) = that CI still wider than ±{_POLICY.unstable_rel_ci:.0%}, or other processes took over "
                  f"{_POLICY.foreign_cpu:.0%} of the machine's CPU while timing (each flagged row says which, under the table); "
                  f"({TOO_SHORT}) = median under {1e6 * _POLICY.resolution_s:.0f} µs; ({BEATS_BOUND}) = faster than the "
                  "card's memory traffic; "
                  "×bound = compress ×copy ÷ the traffic bound (the card's bytes read and written per element ÷ a copy's 8): "
                  "1× = at the memory traffic the compressor must do; "
                  "vs ref = speed-up over the straightforward reference "
                  "implementation; GB/s = dense input bytes / median compress time; peak/input = peak extra resident memory during "
                  "compress / input bytes; pass = within every limit of the target; flagged = a timing the target checks is "
                  "flagged, so neither pass nor short can be claimed.")

# tests for cuda: engine/cuda end to end against emu's libcuda.so.1, which
# PTXLM_LIBCUDA selects (the engine never links it). emu is always built, so
# these tests always run (CI included).

# ptxlm_emu_gtest(NAME SOURCE ...): a gtest whose driver is emu.
function(ptxlm_emu_gtest name)
  ptxlm_gtest(${name} ${ARGN})
  add_dependencies(${name} ptxlm_emu_libcuda)
  target_compile_definitions(${name} PRIVATE PTXLM_EMU_LIBCUDA="$<TARGET_FILE:ptxlm_emu_libcuda>")
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>")
endfunction()

ptxlm_emu_gtest(test_cuda_driver test_cuda_driver.cpp LIBS ptxlm_engine GTest::gmock TIMEOUT 120 SANITIZE)
ptxlm_emu_gtest(test_cuda_events test_cuda_events.cpp LIBS ptxlm_engine GTest::gmock TIMEOUT 120 SANITIZE)
# The example kernels on emu against their C++ references (the examples'
# tolerances), plus a negative control.
ptxlm_emu_gtest(test_examples_emu test_examples_emu.cpp LIBS ptxlm_engine ptxlm_kernels TIMEOUT 300)
# emu's JIT check: ptxas's verdict, register counts and the content-hash cache.
ptxlm_emu_gtest(test_emu_jit test_emu_jit.cpp LIBS ptxlm_engine GTest::gmock TIMEOUT 120)
target_compile_definitions(test_emu_jit PRIVATE PTXLM_PTXAS="${PTXLM_PTXAS_EXE}")
# mma.sync m16n8k32 (8-bit) in emu against the CPU's product, by the ISA's
# lane map; ptxas assembles it.
ptxlm_gtest(test_emu_mma test_emu_mma.cpp LIBS ptxlm_emu_core ptxlm_kernels TIMEOUT 60 SANITIZE)
target_compile_definitions(test_emu_mma PRIVATE PTXLM_PTXAS="${PTXLM_PTXAS_EXE}")
# The decode path's GEMV kernels on emu against the dequantized reference,
# with negative controls.
ptxlm_emu_gtest(test_gemv_emu test_gemv_emu.cpp LIBS ptxlm_engine ptxlm_kernels TIMEOUT 300)
# The epilogues: a GLU's act(gate)·up and the per-layer gate, with its round-trip count.
ptxlm_emu_gtest(test_gemv_epilogue_emu test_gemv_epilogue_emu.cpp LIBS ptxlm_engine ptxlm_kernels ptxlm_emu_core TIMEOUT 300)
# GEMV shared-memory wavefronts and conversions at Llama-3-8B's shapes, counted
# by emu's interpreter directly (issue 20's targets for the 8-bit input).
ptxlm_gtest(test_gemv_counts test_gemv_counts.cpp LIBS ptxlm_emu_core ptxlm_kernels ptxlm_engine TIMEOUT 600)
# RoPE + KV append and split attention on emu against host references.
ptxlm_emu_gtest(test_attention_emu test_attention_emu.cpp LIBS ptxlm_engine ptxlm_kernels TIMEOUT 300)
# Paged flash-decoding attention on emu against a double reference from the
# same pages (depths, windows, groups, a mixed batch, a wrong page as the
# negative control), and its counts at Llama-3-8B's heads beside today's kernel.
ptxlm_emu_gtest(test_paged_attention_emu test_paged_attention_emu.cpp LIBS ptxlm_engine ptxlm_kernels ptxlm_emu_core TIMEOUT 300)
# RoPE + the K/V append into pages (bit-equal to its f32 mirror, a wrong page
# id and a shifted position as controls), its counts, and the chain
# paged_rope -> paged_attention against today's attention over 20 steps.
ptxlm_emu_gtest(test_paged_rope_emu test_paged_rope_emu.cpp LIBS ptxlm_engine ptxlm_kernels ptxlm_emu_core TIMEOUT 300)
# Copy-on-write of KV pages in every pool (a partial page, a whole one, a
# skipped entry; controls: one row short, the wrong source page).
ptxlm_emu_gtest(test_kv_copy_emu test_kv_copy_emu.cpp LIBS ptxlm_engine ptxlm_kernels TIMEOUT 120)
# The embedding row (bit-equal to gguf's dequantizers) and gemma3's normalised add.
ptxlm_emu_gtest(test_elementwise_emu test_elementwise_emu.cpp LIBS ptxlm_engine ptxlm_kernels ptxlm_emu_core TIMEOUT 120)
# The GPU decode path end to end on emu against the CPU reference: synthetic
# models teacher-forced over 36 positions (with a negative control), SmolLM2
# over its first 4.
ptxlm_emu_gtest(test_cuda_backend test_cuda_backend.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 2000)
# A phi3 file with separate q/k/v (the fused synthetic one rewritten): the fused
# file's logits bit for bit on the CPU and on emu; k and v swapped as the control.
ptxlm_emu_gtest(test_separate_qkv test_separate_qkv.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 300)
# The default path's GEMVs op by op against the CPU quantized path fed the
# device's own activations, with a negative control.
ptxlm_emu_gtest(test_cuda_ops test_cuda_ops.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 1200)
# ptxlm run/bench on the GPU path with emu as the driver, as a user drives it.
ptxlm_pytest(cli_cuda_emu check_cli_cuda_emu.py TIMEOUT 2000)
set_property(TEST cli_cuda_emu APPEND PROPERTY ENVIRONMENT "PTXLM_EMU_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>")
# serve --device cuda --parallel 2 on emu: two concurrent greedy completions
# through the GPU's batch step give the CPU server's text; refusals.
ptxlm_pytest(check_serve_cuda_emu check_serve_cuda_emu.py TIMEOUT 600)
set_property(TEST check_serve_cuda_emu APPEND PROPERTY ENVIRONMENT "PTXLM_EMU_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>")
# bench/gpu-report end to end on emu (selftest, profile, tg, projection) on a
# tiny synthetic llama, so that its first run on a GPU is not its first run.
ptxlm_pytest(check_gpu_report check_gpu_report.py TIMEOUT 300)
set_property(TEST check_gpu_report APPEND PROPERTY ENVIRONMENT "PTXLM_EMU_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>")
# Every kernel of the real and synthetic models' decode chains through ptxas.
ptxlm_gtest(test_decode_plan test_decode_plan.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 600)
target_compile_definitions(test_decode_plan PRIVATE PTXLM_PTXAS="${PTXLM_PTXAS_EXECUTABLE}")
# The kernel tests again with emu's memory-model checking on for every launch
# (PTXLM_EMU_RACECHECK=1): no kernel of the decode path may race.
foreach(t test_gemv_emu test_gemv_epilogue_emu test_attention_emu test_paged_attention_emu test_paged_rope_emu test_kv_copy_emu
          test_elementwise_emu)
  add_test(NAME ${t}_racecheck COMMAND ${t})
  set_tests_properties(${t}_racecheck PROPERTIES TIMEOUT 300 LABELS "unit"
    ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>;PTXLM_EMU_RACECHECK=1")
endforeach()
# The kernel tests and the llama decode path again in emu's hardware-variance
# mode (PTXLM_EMU_VARIANCE=1): .approx results anywhere within their PTX ISA
# bounds, plain mul+add fused as ptxas may; the tolerances must survive that.
foreach(t test_gemv_emu test_gemv_epilogue_emu test_attention_emu test_paged_attention_emu test_paged_rope_emu test_elementwise_emu test_examples_emu)
  add_test(NAME ${t}_variance COMMAND ${t})
  set_tests_properties(${t}_variance PROPERTIES TIMEOUT 300 LABELS "unit"
    ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>;PTXLM_EMU_VARIANCE=1")
endforeach()
add_test(NAME test_cuda_backend_variance COMMAND test_cuda_backend --gtest_filter=*Synth*/llama)
set_tests_properties(test_cuda_backend_variance PROPERTIES TIMEOUT 400 LABELS "unit"
  ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>;PTXLM_EMU_VARIANCE=1")
# The default path's per-op check on the synthetic llama, the same way.
add_test(NAME test_cuda_ops_variance COMMAND test_cuda_ops --gtest_filter=*Synth*Every*/llama)
set_tests_properties(test_cuda_ops_variance PROPERTIES TIMEOUT 300 LABELS "unit"
  ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>;PTXLM_EMU_VARIANCE=1")
# emu's device queue: launches return before their kernels run, a host talks
# to a running kernel through mapped memory, deferred mode (it re-runs itself
# with PTXLM_EMU_DEFERRED=1) makes a missing sync read stale data.
ptxlm_emu_gtest(test_emu_async test_emu_async.cpp LIBS ptxlm_engine GTest::gmock TIMEOUT 120 SANITIZE)
# The GPU decode path with emu's deferred mode (PTXLM_EMU_DEFERRED=1): queued
# work runs only at a sync, so a missing sync in the engine reads stale data.
add_test(NAME test_cuda_backend_deferred COMMAND test_cuda_backend --gtest_filter=*Synth*/llama)
set_tests_properties(test_cuda_backend_deferred PROPERTIES TIMEOUT 300 LABELS "unit"
  ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>;PTXLM_EMU_DEFERRED=1")
# The persistent decoder on emu: logits equal to the graph schedule's, greedy
# streams, seeds with memory-model checking (paged KV's too), cancel within a token.
ptxlm_emu_gtest(test_persistent test_persistent.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 900)
set_property(TEST test_persistent APPEND PROPERTY ENVIRONMENT "GTEST_FILTER=-*Seeds*:*Real*")
add_test(NAME test_persistent_real COMMAND test_persistent --gtest_filter=*Real*)
set_tests_properties(test_persistent_real PROPERTIES TIMEOUT 900 LABELS "unit"
  ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>")
add_test(NAME test_persistent_seeds COMMAND test_persistent --gtest_filter=*Seeds*)
set_tests_properties(test_persistent_seeds PROPERTIES TIMEOUT 900 LABELS "unit"
  ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>")
# Paged KV in the decode path (the default; --gpu-contiguous-kv turns it off): paged_rope -> paged_attention
# over one page table row against the contiguous cache and the CPU on the
# synthetic models, fill_kv_for_count in both layouts, an aliased page as the
# negative control; the persistent schedule with paged KV against the paged
# graph schedule bit for bit, a dropped dependency reported as a race; the
# refusal (head size 80).
ptxlm_emu_gtest(test_cuda_paged test_cuda_paged.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 600)
# Gemma 4 (issue 25): the synthetic presets' logits on paged KV, one token at
# a time and in prompt chunks, against the CPU reference; a CPU model without
# each of its features (soft-cap, output scales, v norm, per-layer
# embeddings) as the negative controls; the contiguous cache's refusal.
ptxlm_emu_gtest(test_cuda_gemma4 test_cuda_gemma4.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 600)
# The batch step (CudaBackend::step under cpu::Batcher): mixed batches bit-equal
# to each sequence alone, the CPU quantized path within a bound, a wrong page.
ptxlm_emu_gtest(test_cuda_step test_cuda_step.cpp LIBS ptxlm_engine ptxlm_synth TIMEOUT 600)
# The same under emu's memory-model checking for every launch: the paged pair
# in the engine path (graph schedule; chain with programmatic launches).
add_test(NAME test_cuda_paged_racecheck COMMAND test_cuda_paged --gtest_filter=*ChainSchedule*:*Synth*/llama)
set_tests_properties(test_cuda_paged_racecheck PROPERTIES TIMEOUT 300 LABELS "unit"
  ENVIRONMENT "PTXLM_LIBCUDA=$<TARGET_FILE:ptxlm_emu_libcuda>;PTXLM_EMU_RACECHECK=1")

#!/usr/bin/env bash
# Measures one NVIDIA GPU with moesim's CUDA backend (calibrate/BENCH.md, "NVIDIA GPUs") in one go, for a
# machine lent for a few minutes: the device-to-device copy and host transfers, then cuBLAS GEMV/GEMM, the
# launch overhead and the MoE expert chains at the shapes of five models that span the weight-matrix sizes
# people run (Qwen3-30B-A3B's 3 MiB experts to Llama-3.1-70B's 448 MiB MLP matrices), each step under its own
# time limit so that one that hangs cannot take the others with it.
#
#   scripts/calibrate-cuda.sh OUTDIR NAME [PEAKS]
#
# OUTDIR gets NAME.memory.json, NAME.json (the kernels), nvidia-smi.txt and calibrate-cuda.log. PEAKS is --peak-flops (default: the H100 SXM datasheet's dense figures,
# bf16=989TFLOPS,fp16=989TFLOPS,fp8=1979TFLOPS; NVIDIA H100 Tensor Core GPU datasheet, SXM column, without
# sparsity). MOESIM names the moesim command (default build/moesim); it may hold arguments, e.g. a loader.
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: scripts/calibrate-cuda.sh OUTDIR NAME [PEAKS]" >&2
  exit 2
fi
out=$1
name=$2
peaks=${3:-bf16=989TFLOPS,fp16=989TFLOPS,fp8=1979TFLOPS}
read -r -a moesim <<<"${MOESIM:-build/moesim}"
mkdir -p "$out"
log=$out/calibrate-cuda.log

step() {  # step SECONDS DESCRIPTION COMMAND...: runs it under a limit, its output to the log and stdout
  local limit=$1 what=$2
  shift 2
  echo "== $what ($(date -u +%H:%M:%S), limit ${limit}s)" | tee -a "$log"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "== $what: exit $rc" | tee -a "$log"
}

{
  nvidia-smi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit,pcie.link.gen.max,pcie.link.width.max --format=csv
} >"$out/nvidia-smi.txt" 2>&1
cat "$out/nvidia-smi.txt"

step 100 "memory" "${moesim[@]}" calibrate memory --backend cuda --id "$name.memory" --out "$out/$name.memory.json"
models=mixtral-8x7b,qwen3-30b-a3b,gpt-oss-120b,deepseek-v3,llama-3.1-70b
step 240 "kernels at the shapes of $models" "${moesim[@]}" calibrate kernels --backend cuda --model "$models" \
  --peak-flops "$peaks" --max-seconds 180 --id "$name" --out "$out/$name.json"
ls -la "$out"

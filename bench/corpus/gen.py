#!/usr/bin/env python3
"""gen.py - writes bench/corpus/commands.txt: the plan, table and ZeRO-3 estimate commands whose outputs must not
change when the planner is made faster (bench/corpus/README.md).

One command per line, the arguments after `oomless`. Deterministic: the hand-picked commands
first, then crossings of the knobs, each line once. Run from anywhere:

    python3 bench/corpus/gen.py > bench/corpus/commands.txt
"""

import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ALL31 = ("rtx-2060,rtx-2080-ti,rtx-3060,rtx-3080,rtx-3090,rtx-4060-ti,rtx-4070-ti,rtx-4080,"
         "rtx-4090,rtx-5090,quadro-rtx-6000,rtx-a4000,rtx-a5000,rtx-a6000,rtx-6000-ada,t4,"
         "v100-16gb,v100-32gb,a10,a10g,l4,l40s,a100-40gb,a100-80gb,h100-pcie,h100-sxm,h100-nvl,"
         "h200,b200,mi250,mi300x")

# The searches of issue 34 and bench/README.md, as they were measured.
HEAVY = [
    "plan --model llama-3.1-8b --gpu h100 --seq 2048 --target-effective-batch 8192 --gpus 8 --allow all --json",
    "plan --model llama-3.1-8b --gpu h100 --seq 2048 --target-effective-batch 4096 --gpus 8 --allow all --checkpointing-variants all --packing padding-free --json",
    "plan --model qwen3-0.6b --gpu h100 --seq 2048 --target-effective-batch 8192 --gpus 8 --allow all --checkpointing-variants all --json",
    "table --model llama-3.1-8b --seq 2048 --target-effective-batch 4096 --allow all --checkpointing-variants all --gpus " + ALL31 + " --format json",
    "table --model llama-3.1-8b --seq 2048 --target-effective-batch 4096 --allow all --checkpointing-variants all --gpus " + ALL31,
    "plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32 --json",
    "plan --model llama-2-7b --nodes 2 --gpus-per-node 8 --gpu a100-80gb --seq-range 512:8192 --target-effective-batch 1024 --allow all --json",
    "plan --model mixtral-8x7b --method qlora --gpus 8 --gpu h100-sxm --seq-range 256:32768 --target-effective-batch 512 --allow all --json",
    "plan --model gpt2 --method inference --seq-range 128:1024 --gpu a100-80gb --allow precision --json",
    "plan --model llama-2-70b --seq 4096 --gpu rtx-4090 --allow all --json",
    "plan --model llama-2-70b --gpus 8 --gpu rtx-4090 --seq-range 64:32768 --target-effective-batch 4096 --allow all --json",
]

# One command per knob value, on a workload where the knob matters.
SINGLE = [
    # methods and precisions
    "plan --model llama-3.1-8b --method full --seq 1024 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --seq 1024 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method qlora --seq 1024 --gpu rtx-3090 --json",
    "plan --model llama-3.1-8b --method inference --seq 4096 --gpu h100-sxm --json",
    "plan --model llama-3.1-8b --method inference --seq auto --gpu rtx-4090 --json",
    "plan --model qwen2.5-7b --method inference --seq auto --gpu h100-sxm --format vllm",
    "plan --model llama-3.1-70b --method inference --seq 8192 --tensor-parallel 4 --gpus 4 --gpu h100-sxm --format vllm",
    "plan --model llama-3.1-8b --method inference --seq 2048 --kv-cache transformers --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method inference --seq 2048 --max-num-seqs 64 --max-num-batched-tokens 8192 --gpu a100-80gb --format vllm",
    "plan --model gemma-2-9b --method inference --seq 8192 --gpu a100-80gb --allow precision --json",
    "plan --model mistral-7b --method inference --seq 16384 --gpu l40s --json",
    "plan --model llama-3.2-1b --precision fp32 --seq 512 --gpu rtx-3090 --json",
    "plan --model llama-3.2-1b --precision fp16 --seq 512 --gpu t4 --json",
    "plan --model llama-3.2-1b --precision bf16 --seq 512 --gpu rtx-3090 --json",
    "plan --model llama-3.2-1b --precision amp-fp16 --seq 512 --gpu v100-32gb --json",
    "plan --model llama-3.2-1b --precision amp-bf16 --seq 512 --gpu a100-40gb --json",
    "plan --model llama-3.1-8b --method lora --precision int8 --seq 512 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method lora --precision 4bit --seq 512 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method inference --precision 4bit --seq 2048 --gpu rtx-3060 --json",
    "plan --model llama-3.1-8b --method inference --precision int8 --seq 2048 --gpu rtx-3090 --json",
    # optimizers
    "plan --model qwen2.5-1.5b --optimizer adamw --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer adamw-fused --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer adamw-8bit --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer paged-adamw --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer paged-adamw-8bit --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer adafactor --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer sgd --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer sgd-momentum --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer lion --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer none --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --optimizer adamw --allow optimizer --seq 1024 --gpu rtx-3080 --json",
    # sharding, offload
    "plan --model llama-3.1-8b --gpus 8 --gpu a100-40gb --sharding zero1 --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --gpus 8 --gpu a100-40gb --sharding zero2 --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --gpus 8 --gpu a100-40gb --sharding zero3 --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --gpus 8 --gpu a100-40gb --sharding zero3 --seq 2048 --target-effective-batch 64 --allow none --json",
    "plan --model llama-3.1-8b --gpus 8 --gpu a100-40gb --sharding fsdp2 --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --gpus 4 --gpu rtx-4090 --sharding zero3 --offload optimizer --seq 1024 --target-effective-batch 32 --json",
    "plan --model llama-3.1-8b --gpus 4 --gpu rtx-4090 --sharding zero3 --offload optimizer+params --seq 1024 --target-effective-batch 32 --json",
    "plan --model llama-3.1-8b --gpus 2 --gpu rtx-4090 --sharding zero2 --offload optimizer --seq 1024 --target-effective-batch 32 --json",
    "plan --model llama-3.1-8b --gpu rtx-4090 --allow offload --seq 1024 --json",
    "plan --model llama-3.1-8b --gpus 4 --gpu rtx-4090 --allow offload,sharding --seq 1024 --json",
    "plan --model qwen3-0.6b --gpus 8 --gpu a100-80gb --sharding zero3 --seq 2048 --target-effective-batch 256 --json",
    "plan --model qwen3-0.6b --gpus 8 --gpu a100-80gb --sharding zero3 --zero3-max-live-params 1e8 --zero3-prefetch-bucket 1e7 --zero3-persistence-threshold 1e4 --zero3-max-reuse-distance 1e8 --zero3-reduce-bucket 1e8 --seq 2048 --target-effective-batch 256 --json",
    "plan --model qwen3-0.6b --gpus 8 --gpu a100-80gb --sharding zero3 --zero3-prefetch-bucket 0 --seq 2048 --target-effective-batch 256 --json",
    "plan --model qwen3-0.6b --gpus 8 --gpu a100-80gb --sharding zero3 --zero3-max-reuse-distance 0 --seq 2048 --target-effective-batch 256 --json",
    "plan --model t5-base --gpus 4 --gpu rtx-3090 --sharding zero3 --seq 512 --decoder-seq 128 --target-effective-batch 64 --json",
    "plan --model t5-large --gpus 2 --gpu a10 --allow all --seq 512 --decoder-seq 64 --target-effective-batch 32 --json",
    "plan --model bert-base --gpus 2 --gpu t4 --sharding zero3 --seq 512 --target-effective-batch 64 --json",
    "plan --model gpt2 --gpus 2 --gpu rtx-3060 --sharding zero3 --offload optimizer+params --seq 1024 --json",
    "plan --model mixtral-8x7b --gpus 8 --gpu h100-sxm --sharding zero3 --seq 4096 --target-effective-batch 64 --json",
    "plan --model deepseek-v2-lite --gpus 8 --gpu a100-80gb --sharding zero3 --method lora --seq 2048 --json",
    "plan --model llama-4-scout-17b-16e --gpus 8 --gpu h100-sxm --sharding zero3 --method lora --seq 2048 --json",
    "plan --model gemma-3-4b --gpus 4 --gpu l4 --sharding zero3 --seq 1024 --target-effective-batch 16 --json",
    "plan --model qwen3-30b-a3b --gpus 8 --gpu h200 --sharding zero3 --seq 4096 --target-effective-batch 128 --allow all --json",
    # checkpointing and its variants
    "plan --model llama-3.1-8b --checkpointing none --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing selective --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing full --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing every:2 --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing nth:2 --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing full+offload --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing every:4+offload --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --checkpointing op-sac --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --seq 4096 --gpu rtx-4090 --checkpointing-variants transformers --json",
    "plan --model llama-3.1-8b --method lora --seq 4096 --gpu rtx-4090 --checkpointing-variants torchtitan --json",
    "plan --model llama-3.1-8b --method lora --seq 4096 --gpu rtx-4090 --checkpointing-variants op-sac,nth:2 --json",
    "plan --model llama-3.1-8b --method lora --seq 4096 --gpu rtx-4090 --checkpointing-variants every:2,full+offload --json",
    "plan --model llama-3.1-8b --method lora --seq 4096 --gpu rtx-4090 --checkpointing-variants none --json",
    "plan --model llama-4-scout-17b-16e --method qlora --seq 2048 --gpu h100-sxm --checkpointing-variants all --json",
    # packing
    "plan --model llama-3.2-3b --packing padding-free --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --packing block-mask --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --packing padding-free --attention flash --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --packing padding-free --tokens-per-batch 16384 --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.2-3b --packing block-mask --tokens-per-batch 8192 --seq 1024 --gpu a100-80gb --format torchtune",
    "plan --model llama-3.2-3b --packing padding-free --seq 2048 --gpu rtx-4090 --format trl",
    "plan --model llama-3.2-3b --packing padding-free --seq 2048 --gpu rtx-4090 --format args",
    "plan --model llama-3.2-3b --packing padding-free --seq 2048 --gpu rtx-4090 --allow all --checkpointing-variants all --json",
    # attention, loss
    "plan --model llama-3.2-3b --attention eager --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --attention flash --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --attention eager --allow attention --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --loss chunked --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.2-3b --allow loss --seq 2048 --gpu rtx-4090 --json",
    # gpus and nodes
    "plan --model llama-3.1-8b --gpus 2 --gpu a100-80gb --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --gpus 4 --gpu a100-80gb --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --gpus 8 --gpu a100-80gb --seq 2048 --target-effective-batch 64 --json",
    "plan --model llama-3.1-8b --nodes 2 --gpus-per-node 8 --gpu h100-sxm --seq 2048 --target-effective-batch 256 --json",
    "plan --model llama-3.1-70b --nodes 4 --gpus-per-node 8 --gpu h100-sxm --seq 4096 --target-effective-batch 512 --allow all --json",
    "plan --model llama-3.1-8b --nodes 2 --gpus-per-node 4 --gpu a100-40gb --seq 2048 --target-effective-batch 96 --allow all --format torchrun",
    "plan --model llama-3.1-8b --gpus 8 --gpu h100-sxm --nccl-buffsize 2097152 --nccl-channels 16 --nccl-nvls no --nccl-communicators 2 --seq 2048 --json",
    # fixed values, downscaling, inexact
    "plan --model llama-3.1-8b --method lora --batch-size 16 --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method lora --batch-size 16 --seq 2048 --gpu rtx-4090 --no-allow-downscale",
    "plan --model llama-3.1-8b --method lora --batch-size 4 --grad-accum 8 --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method lora --batch-size 64 --seq 8192 --gpu rtx-4090 --allow-downscale=batch,seq,checkpointing --json",
    "plan --model llama-3.1-8b --method lora --seq 16384 --checkpointing none --gpu rtx-4090 --allow-downscale=seq --json",
    "plan --model llama-3.1-8b --method lora --seq 8192 --checkpointing selective --gpu rtx-4090 --allow-downscale=checkpointing --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 97 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 97 --gpu rtx-4090 --allow-inexact --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 100 --gpus 8 --gpu a100-80gb --allow-inexact --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 100 --gpus 8 --gpu a100-80gb",
    "plan --model gpt2 --seq 1024 --target-effective-batch 4093 --gpu h100-sxm --json",
    "plan --model gpt2 --seq 128 --target-effective-batch 65521 --gpu h100-sxm --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --max-batch-size 3 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --max-auto-batch-size 5 --target-effective-batch 60 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --seq-range 1024:16384 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method lora --seq-range 100:3000 --gpu rtx-3090 --allow all --json",
    # budgets
    "plan --model llama-3.1-8b --method lora --seq 2048 --vram 20 --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --vram 16GiB --vram-safety-margin 10% --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --vram-safety-margin 2048 --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu a100-80gb --fit-confidence 0.95 --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu a100-80gb --fit-confidence 0.5 --allow all --json",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu a100-80gb --fit-confidence 0.999 --json",
    "plan --model qwen2.5-0.5b --method lora --seq 1024 --gpu a100-80gb --workers auto --json",
    "plan --model qwen2.5-0.5b --method lora --seq 1024 --gpu a100-80gb --workers 3 --json",
    "plan --model qwen2.5-0.5b --method inference --seq 1024 --gpu a100-80gb --workers 2 --json",
    "plan --model llama-3.1-8b --seq 2048 --gpu rtx-4090 --overhead 1GiB --cublas-workspace :4096:8 --json",
    "plan --model llama-3.1-8b --seq 2048 --gpu rtx-4090 --keep-grads yes --method lora --json",
    # objectives and RL
    "plan --model llama-3.1-8b --method lora --objective dpo --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --objective ipo --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --objective simpo --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --objective orpo --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --objective kto --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --objective reward --seq 2048 --gpu a100-80gb --json",
    "plan --model llama-3.1-8b --method lora --objective grpo --seq 2048 --gpu a100-80gb --json",
    "plan --model qwen2.5-1.5b --method full --objective dpo --reference copy --reference-precision bf16 --seq 1024 --gpu a100-80gb --json",
    "plan --model qwen2.5-1.5b --method full --objective dpo --precompute-ref yes --seq 1024 --gpu a100-80gb --json",
    "plan --model qwen2.5-1.5b --method lora --objective kto --reference none --seq 1024 --gpu rtx-4090 --json",
    "plan --model qwen2.5-1.5b --method full --objective grpo --num-generations 4 --completion-len 256 --seq 1024 --gpu a100-80gb --json",
    "plan --model qwen2.5-1.5b --method lora --objective grpo --rollout vllm-colocate --seq 1024 --gpu a100-80gb --json",
    "plan --model qwen2.5-1.5b --method lora --objective grpo --rollout vllm-colocate --sleep-mode 1 --seq 1024 --gpu a100-80gb --format trl",
    "plan --model qwen2.5-1.5b --method lora --objective grpo --rollout vllm-colocate --sleep-mode 2 --seq 1024 --gpu a100-80gb --format verl",
    "plan --model qwen2.5-7b --method full --objective grpo --rollout vllm-colocate --seq 2048 --gpu rtx-4090",
    "plan --model qwen2.5-1.5b --method lora --objective grpo --rollout vllm-colocate --seq 1024 --gpus 4 --gpu a100-80gb --sharding zero3 --json",
    # LoRA knobs, quantisation knobs
    "plan --model llama-3.1-8b --method lora --lora-rank 64 --lora-targets all-linear --lora-dropout 0 --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method lora --lora-targets q_proj,v_proj --seq 2048 --gpu rtx-4090 --json",
    "plan --model llama-3.1-8b --method qlora --double-quant no --adapter-dtype bf16 --kbit-prepare yes --seq 2048 --gpu rtx-3090 --json",
    "plan --model llama-3.1-8b --method lora --seq 16384 --max-positions 131072 --gpu h100-sxm --json",
    # measured lines
    "plan --fixed-bytes 2GiB --bytes-per-sample 40MiB --target-effective-batch 64 --gpu rtx-4090 --json",
    "plan --fixed-bytes 2GiB --bytes-per-sample 40MiB --n-positives 8 --n-negatives 23 --target-effective-batch 64 --gpu rtx-4090 --json",
    "plan --fixed-bytes 1GiB --bytes-per-token 64KiB --seq 2048 --flops-per-sample 1e13 --target-effective-batch 32 --gpu a100-80gb --json",
    "plan --fixed-bytes 30GiB --bytes-per-sample 1GiB --gpu rtx-4090 --json",
    "plan --fixed-bytes 1GiB --bytes-per-sample 10MiB --sample-multiplier 3 --gpus 4 --target-effective-batch 400 --gpu a10 --json",
    "plan --fixed-bytes 1GiB --bytes-per-token 1MiB --seq-range 128:4096 --gpu rtx-4090 --json",
    # nothing fits
    "plan --model llama-2-70b --seq 4096 --gpu rtx-3060 --json",
    "plan --model llama-2-70b --seq 4096 --gpu rtx-3060",
    "plan --model llama-3.1-70b --method full --seq 8192 --gpus 2 --gpu rtx-4090 --allow all --json",
    "plan --model deepseek-v3 --method lora --seq 4096 --gpus 8 --gpu h200 --allow all --json",
    "plan --model qwen2.5-72b --method inference --seq 32768 --gpu a100-80gb --json",
    # config files and workloads
    "plan --model bench/accuracy/public/T0_3B.json --seq 512 --gpu a100-40gb --allow all --json",
    "plan --model bench/accuracy/public/bloomz-7b1.json --method lora --seq 1024 --gpu a100-80gb --json",
    "plan --model bench/accuracy/public/mt0-xxl.json --gpus 8 --gpu a100-80gb --allow all --seq 512 --target-effective-batch 64 --json",
    "plan --workload tests/data/plan/contrastive.yaml --gpu rtx-4090 --json",
    # formats
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --format env",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --format args",
    "plan --model llama-3.1-8b --gpus 8 --seq 2048 --gpu a100-80gb --sharding zero3 --format deepspeed",
    "plan --model llama-3.1-8b --gpus 8 --seq 2048 --gpu a100-80gb --sharding zero3 --offload optimizer --format deepspeed",
    "plan --model llama-3.1-8b --gpus 8 --seq 2048 --gpu a100-80gb --format torchrun",
    "plan --model llama-3.1-8b --gpus 8 --seq 2048 --gpu a100-80gb --sharding zero3 --format accelerate",
    "plan --model llama-3.1-8b --gpus 8 --seq 2048 --gpu a100-80gb --sharding zero3 --format torchtitan",
    "plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --format torchtune",
    "plan --model llama-3.1-8b --method inference --seq 4096 --gpu rtx-4090 --format vllm",
    "plan --model llama-3.1-8b --method inference --seq 4096 --gpu rtx-4090",
    "plan --model llama-3.1-8b --gpus 8 --seq 2048 --gpu h100-sxm --allow all --checkpointing-variants all",
    # tables
    "table --model llama-3.1-8b --method lora --seq 2048",
    "table --model llama-3.1-8b --method lora --seq 2048 --format markdown",
    "table --model llama-3.1-8b --method lora --seq 2048 --format csv",
    "table --model llama-3.1-8b --method qlora --seq 4096 --gpus " + ALL31 + " --format json",
    "table --model qwen3-0.6b --seq 2048 --target-effective-batch 256 --allow all --gpus " + ALL31 + " --format csv",
    "table --model llama-3.1-8b --method inference --seq 8192 --allow precision --gpus " + ALL31,
    "table --model mixtral-8x7b --method qlora --seq 2048 --nodes 1 --gpus-per-node 8 --allow all --gpus a100-80gb,h100-sxm,h200,b200,mi300x --format json",
    "table --workloads tests/data/plan/workloads.yaml --gpus rtx-3090,rtx-4090,a100-80gb --format json",
    "table --workloads tests/data/plan/workloads.yaml",
    "table --fixed-bytes 2GiB --bytes-per-sample 40MiB --target-effective-batch 64 --format csv",
]

GPUS = ["rtx-3060", "rtx-4090", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x",
        "l4", "v100-32gb", "t4", "rtx-a6000", "l40s", "mi250", "h100-pcie", "rtx-5090"]


def crossings():
    """Knob crossings on a few models: multi-GPU searches (sharding, offload, ZeRO-3) at several
    effective batches, the allow sets, the variants, and the single-GPU families."""
    out = []
    models = ["qwen3-0.6b", "llama-3.2-1b", "llama-3.1-8b", "mistral-7b", "gemma-2-2b",
              "smollm2-360m", "phi-3-mini", "qwen2.5-14b"]
    allows = ["all", "sharding,offload", "precision,optimizer", "checkpointing,sharding,loss",
              "attention,loss", "none"]
    # the multi-GPU searches with ZeRO-3 among their families, on every GPU of the list
    for i, (model, gpu) in enumerate(itertools.product(models, GPUS)):
        if i % 3:
            continue
        eff = [64, 256, 1024, 4096, 96, 8192][i % 6]
        gpus = [2, 4, 8][i % 3 if i % 3 else (i // 3) % 3]
        allow = allows[i % len(allows)]
        variants = ["none", "all", "transformers"][(i // 2) % 3]
        out.append(f"plan --model {model} --gpus {gpus} --gpu {gpu} --seq {[1024, 2048, 4096][i % 3]} "
                   f"--target-effective-batch {eff} --allow {allow} --checkpointing-variants {variants} --json")
    # methods x allow sets on one GPU
    for i, (model, method) in enumerate(itertools.product(models, ["full", "lora", "qlora", "inference"])):
        gpu = GPUS[i % len(GPUS)]
        allow = allows[i % len(allows)]
        out.append(f"plan --model {model} --method {method} --gpu {gpu} --seq {[512, 2048, 8192][i % 3]} "
                   f"--allow {allow} --json")
    # ZeRO-3 with offload over models and GPU counts
    for i, model in enumerate(models + ["t5-base", "bert-large", "gpt2-xl", "falcon-7b", "phi-4",
                                        "gemma-3-12b", "llama-2-13b", "qwen3-8b"]):
        gpus = [2, 4, 8, 16][i % 4]
        off = ["none", "optimizer", "optimizer+params"][i % 3]
        gpu = GPUS[(3 * i) % len(GPUS)]
        seq = {"t5-base": 512, "bert-large": 512, "gpt2-xl": 1024}.get(model, 2048)
        out.append(f"plan --model {model} --gpus {gpus} --gpu {gpu} --sharding zero3 --offload {off} "
                   f"--seq {seq} --target-effective-batch {gpus * 8} --json")
        out.append(f"plan --model {model} --gpus {gpus} --gpu {gpu} --sharding zero3 --offload {off} "
                   f"--seq {seq} --target-effective-batch {gpus * 8} --allow all --checkpointing-variants all --json")
    # awkward and inexact targets
    for i, eff in enumerate([7, 31, 97, 127, 250, 509, 1000, 1021, 3000, 4099]):
        model = models[i % len(models)]
        gpu = GPUS[(5 * i) % len(GPUS)]
        out.append(f"plan --model {model} --gpu {gpu} --seq 1024 --target-effective-batch {eff} --allow all --json")
        out.append(f"plan --model {model} --gpu {gpu} --seq 1024 --target-effective-batch {eff} --allow-inexact --json")
    # nodes
    for i, (nodes, per) in enumerate([(2, 8), (4, 8), (2, 4), (8, 8)]):
        model = ["llama-3.1-8b", "qwen2.5-14b", "mistral-7b", "llama-3.1-70b"][i]
        out.append(f"plan --model {model} --nodes {nodes} --gpus-per-node {per} --gpu {GPUS[4 + i]} "
                   f"--seq 4096 --target-effective-batch {nodes * per * 16} --allow all --json")
    return out


def zero3_estimates():
    """The ZeRO-3 replay itself (its "zero3" object of estimate --json) on every preset: with the
    defaults, and with LoRA, offloaded parameters and DeepSpeed's knobs moved (small windows, a
    large prefetch, no persistence)."""
    presets = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "data", "models"))
                     if f.endswith(".json"))
    out = []
    for i, m in enumerate(presets):
        seq = 512 if m.startswith(("bert", "roberta", "t5")) else 1024
        out.append(f"estimate --model {m} --sharding zero3 --gpus 8 --batch 2 --seq {seq} --json")
        extra = [
            "--method lora --offload optimizer+params",
            "--zero3-max-reuse-distance 1e7 --zero3-prefetch-bucket 2e8 --zero3-max-live-params 3e8",
            "--precision fp32 --zero3-persistence-threshold 0 --offload optimizer",
            "--method qlora --zero3-max-reuse-distance 0 --zero3-prefetch-bucket 0",
        ][i % 4]
        out.append(f"estimate --model {m} --sharding zero3 --gpus 4 --batch 1 --seq {seq} {extra} --json")
    return out


def main():
    seen, lines = set(), []
    for c in HEAVY + SINGLE + crossings() + zero3_estimates():
        if c not in seen:
            seen.add(c)
            lines.append(c)
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

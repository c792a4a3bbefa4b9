#!/usr/bin/env bash
# test_dist.sh — the multi-GPU options on any machine (no GPU run is started): usage errors with exit status 2
# and one line for --gpus where it cannot work, malformed torchrun variables, the batch arithmetic, and a worker
# on the CPU backend. The launcher, the rendezvous and the sharding are tested between real processes by
# build/test_dist.
. "$(dirname "$0")/../lib.sh"
if [ -n "${ASAN_BUILD:-}" ] && [ -x "$ASAN_BUILD/cnn" ]; then CNN=$ASAN_BUILD/cnn; fi
M0="--model resnet18 --stem cifar --num-classes 10 --data synthetic --train-size 64 --no-progress"
M="$M0 --steps 1"

# no machine here has 64 GPUs: without NCCL or a driver it cannot run a multi-GPU job at all, with one it has too
# few GPUs; both are usage errors
expect gpus.too_many 2 'cannot run a multi-GPU job|asks for GPU 63' -- "$CNN" train $M --gpus 64 --out "$TMP/a"
expect gpus.list_too_high 2 'cannot run a multi-GPU job|asks for GPU 1000' -- "$CNN" train $M --gpus 0,1000 --out "$TMP/a"
expect gpus.cpu 2 'needs --device cuda' -- "$CNN" train $M --gpus 2 --device cpu --out "$TMP/a"
expect gpus.malformed 2 'comma-separated list' -- "$CNN" train $M --gpus 2x --out "$TMP/a"
expect gpus.duplicate 2 'named twice' -- "$CNN" train $M --gpus 1,1 --out "$TMP/a"
expect gpus.zero 2 'count must be in' -- "$CNN" train $M --gpus 0 --out "$TMP/a"
expect gpus.bench_infer 2 'mode train' -- "$CNN" bench --model resnet18 --gpus 2 --batch 2
expect gpus.bench_cpu 2 'needs --device cuda' -- "$CNN" bench --model resnet18 --mode train --gpus 2 --device cpu --batch 2
expect gpus.in_worker 2 'RANK is set' -- env RANK=0 WORLD_SIZE=2 "$CNN" train $M --gpus 2 --out "$TMP/a"

# torchrun's variables: malformed values name the variable
expect env.rank_range 2 'RANK=2: expected' -- env RANK=2 WORLD_SIZE=2 "$CNN" train $M --device cpu --out "$TMP/a"
expect env.rank_alone 2 'RANK and WORLD_SIZE' -- env RANK=1 "$CNN" train $M --device cpu --out "$TMP/a"
expect env.world_text 2 'WORLD_SIZE=two' -- env RANK=0 WORLD_SIZE=two "$CNN" train $M --device cpu --out "$TMP/a"
expect env.port 2 'MASTER_PORT=70000' -- env RANK=0 WORLD_SIZE=2 MASTER_PORT=70000 "$CNN" train $M --device cpu --out "$TMP/a"
expect env.local_rank 2 'LOCAL_RANK=-1' -- env RANK=0 WORLD_SIZE=2 LOCAL_RANK=-1 "$CNN" train $M --device cpu --out "$TMP/a"
# a worker of a 2-rank run on the CPU backend: no collectives there
expect env.cpu_worker 2 'multi-GPU' -- env RANK=1 WORLD_SIZE=2 "$CNN" train $M --device cpu --out "$TMP/a"
# a world of one is an ordinary run
expect env.world_one 0 '' -- env RANK=0 WORLD_SIZE=1 "$CNN" train $M --device cpu --batch 8 --eval-size 0 --out "$TMP/one" -q

# the global batch
expect batch.global_not_multiple 2 'not a multiple' -- env RANK=0 WORLD_SIZE=3 "$CNN" train $M --batch-global 8 --out "$TMP/a"
expect batch.both 2 'give one' -- "$CNN" train $M --device cpu --batch 4 --batch-global 8 --out "$TMP/a"
expect batch.global_one 0 '' -- "$CNN" train $M --device cpu --batch-global 8 --eval-size 0 --out "$TMP/g" -q
# --batch-global B on one process is --batch B: the same checkpoint options, so each resumes the other
if [ -f "$TMP/g/checkpoint.safetensors" ]; then
    expect batch.global_resumes 0 '' -- "$CNN" train $M0 --device cpu --batch 8 --steps 1 --eval-size 0 --out "$TMP/g" --resume -q
else
    fail batch.global_resumes "no checkpoint written"
fi
finish

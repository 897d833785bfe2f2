#!/usr/bin/env bash
# One GPU session's checks of the step replay, in one command for the device machine (its
# python3 holds a CUDA torch). Missing packages travel as wheels in .whl (ignored by git):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl jsonschema jsonschema-specifications \
#       referencing rpds-py nvtx
# (.whl is in .git/info/exclude: an ignored path reaches the device machine only when the
# run names it, carry [".whl"]; without it the script runs with that machine's packages)
# then, there: bash bench/gpu_session.sh "$OUT"   (about 8 minutes on an H100)
#
# 1. bench/replay_models.py on CUDA with batches 8x the CPU ones (the default batches give
#    launch-bound steps of 5-11 ms), each capture replayed with the original host's gaps kept
#    (--host-gaps on, judged) and without them (off, the column beside): issue 22's CUDA
#    targets, in-step within 10% of the real step, ops above 2% within 25%.
# 2. The CUDA seams of the step replay and the in-place timer, on the real device.
set -u
out=${1:-/tmp/gpu_session}
mkdir -p "$out"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$out/machine.txt"
timeout 480 python3 bench/replay_models.py --device cuda --batch-scale 8 --reps 3 \
    --host-gaps both --keep "$out/work" 2>&1 | tee "$out/replay_models.txt"
echo "replay_models: exit ${PIPESTATUS[0]}"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_host_gaps.py \
    tests/test_step_replay.py 2>&1 | tail -5 | tee "$out/tests.txt"
rm -rf "$out/work"

#!/usr/bin/env bash
# The GPU checks, in stages, on a machine with an NVIDIA GPU and torch, ftmodel's dependencies
# installed (run from the repository root; nothing is installed or downloaded):
#
#   bash benchmarks/gpu_checks.sh env,tests,smoke,calibrate,validate-eager OUTDIR
#   FROM=G.json bash benchmarks/gpu_checks.sh update,launches,validate-cudagraphs,validate-spec OUTDIR
#
# Stages (comma-separated, run in this order):
#   env            GPU, driver, torch and onnxruntime versions/providers -> OUTDIR/env.txt
#   tests          the CUDA-marked tests and the CUDA lowering test files
#   smoke          a quick calibration and a two-model validation (catches errors early)
#   calibrate      `ftmodel calibrate --device cuda` for eager and cudagraphs (GPU-sized sweeps,
#                  a few minutes on an H100) -> OUTDIR/gpu-profile.json. TorchScript's CUDA host stage did not finish
#                  in 5 minutes on the H100 (2026-11-23): add it with `update` (UPDATE=torchscript)
#                  only with time to spare
#   update         FROM=<profile> UPDATE=<frameworks>: copy FROM to
#                  OUTDIR/gpu-profile.json and re-measure those frameworks into it (--update)
#   launches       profiler kernel counts vs ftmodel's launch counts, eager, batches 1 and 32
#   validate-F     framework F (eager, cudagraphs, torchscript) on the zoo, measured on the GPU,
#                  with OUTDIR/gpu-profile.json; validate-spec: eager with the built-in
#                  spec-sheet profile of the GPU (SPEC, default h100-sxm5) + the measured host
# Each stage logs to OUTDIR/<stage>.log; the validation files go to OUTDIR/results/, and
# OUTDIR/results.tar.gz packs them after every stage (so a stage cut short keeps the others).
set -u
STAGES=${1:-env,tests,smoke,calibrate,validate-eager}
OUT=${2:-benchmarks/results/gpu-checks}
PY=${PY:-python3}
SPEC=${SPEC:-h100-sxm5}
# calibration/ is installed as ftmodel.calibration (pyproject's package-dir): without installing,
# lay the package out that way in a scratch folder, ahead of the checkout on the path
PKG=${PKG:-/tmp/ftmodel-pkg}
rm -rf "$PKG" && mkdir -p "$PKG" && cp -r ftmodel "$PKG/" && cp -r calibration "$PKG/ftmodel/calibration"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PKG:$PWD${PYTHONPATH:+:$PYTHONPATH}"
# `python -m ftmodel` puts the working directory (the checkout, whose ftmodel/ has no
# calibration/) first on sys.path unless PYTHONSAFEPATH is set
CAL=(env PYTHONSAFEPATH=1 "$PY" -m ftmodel calibrate)
# the CPU validation zoo plus full-size ResNet-50 and BERT-Base; batches up to the compute-bound side
MODELS=${MODELS:-$($PY -c "from ftmodel.tools.zoo import VALIDATION_SET as v; print(','.join(v + ('resnet50', 'bert-base')))")}
BATCHES=${BATCHES:-1,2,4,8,16,32,64,128}
mkdir -p "$OUT/results"
PROFILE="$OUT/gpu-profile.json"
ROUNDS=${ROUNDS:-9}

pack() { tar -czf "$OUT/results.tar.gz" -C "$OUT" results $(cd "$OUT" && ls *.log *.json 2>/dev/null); }

run_stage() {  # name, timeout (s), command...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date -u +%T)) ==="
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s ==="
  tail -n 25 "$OUT/$name.log"
  pack
}

for stage in ${STAGES//,/ }; do
  case $stage in
    env) run_stage env 60 bash -c "nvidia-smi; $PY - <<'EOF'
import platform, torch
print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda)
print('gpu', torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))
try:
    import onnxruntime as ort
    print('onnxruntime', ort.__version__, ort.get_available_providers())
except ImportError as e:
    print('onnxruntime missing', e)
import transformers, torchvision, sklearn, scipy, numpy
print('transformers', transformers.__version__, 'torchvision', torchvision.__version__)
EOF
cp $OUT/env.log $OUT/env.txt 2>/dev/null; true" ;;
    tests) run_stage tests 150 bash -c "$PY -m pytest -q -p no:cacheprovider -m requires_cuda \
             tests/test_measure.py tests/calibration/test_suite.py; $PY -m pytest -q -p no:cacheprovider \
             tests/frameworks/test_cudagraphs.py tests/frameworks/test_torchscript_cuda.py tests/frameworks/test_onnx_cuda.py \
             tests/calibration/test_in_model_gpu.py" ;;
    smoke) run_stage smoke 240 bash -c "PYTHONSAFEPATH=1 $PY -m ftmodel calibrate --device cuda --quick --no-progress \
             --frameworks eager,cudagraphs --threads 2 --out $OUT/smoke-profile.json && \
             $PY benchmarks/validate.py --profile $OUT/smoke-profile.json --frameworks eager,cudagraphs \
             --models resnet18@112,bert-mini@64 --batches 1,8 --rounds 3 --out-dir $OUT/smoke" ;;
    calibrate) run_stage calibrate 560 "${CAL[@]}" --device cuda --no-progress \
             --frameworks eager,cudagraphs --threads 2 --out "$PROFILE" ;;
    update) cp "${FROM:?FROM=the profile to update}" "$PROFILE" && run_stage update 300 "${CAL[@]}" \
             --device cuda --no-progress --update --frameworks "${UPDATE:-cudagraphs}" \
             --threads 2 --out "$PROFILE" ;;
    launches) run_stage launches 120 "$PY" benchmarks/gpu_launch_counts.py --profile "$PROFILE" \
             --batches 1,32 --out "$OUT/results/gpu-launch-counts.csv" ;;
    validate-*) fw=${stage#validate-}; extra=(); tag=()
             if [ "$fw" = spec ]; then fw=eager; extra=(--profile "$SPEC" --host "$PROFILE"); tag=(--tag "gpu-$SPEC-spec")
             else extra=(--profile "$PROFILE"); fi
             run_stage "$stage" 300 "$PY" benchmarks/validate.py "${extra[@]}" "${tag[@]}" --framework "$fw" \
             --models "$MODELS" --batches "$BATCHES" --rounds "$ROUNDS" --out-dir "$OUT/results" ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done

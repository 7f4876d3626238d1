#!/usr/bin/env bash
# The measurements of benchmarks/gpu_live.py on a GPU machine, in order of importance, each stage
# under its own time limit (a stage cut short keeps the rows it wrote):
#
#   bash benchmarks/gpu_live.sh OUTDIR
#   STAGES=env,zoo,calibrate CALIBRATE_ARGS= CALIBRATE_S=330 bash benchmarks/gpu_live.sh OUTDIR
#
#   env        GPU, driver, torch / transformers / timm versions            -> OUTDIR/env.txt
#   decode     a Llama-3.2-1B-shaped decode step (fp16, context 1024, batch 1 and 16): eager
#              (dynamic and static cache), CUDA graph, torch.compile with and without CUDA
#              graphs                                                       -> OUTDIR/decode.csv
#   calibrate  `ftmodel calibrate --device cuda $CALIBRATE_ARGS` (default --quick) for
#              $CALIBRATE_FRAMEWORKS (default eager,cudagraphs,inductor)    -> OUTDIR/gpu-profile.json
#              (written after every calibration stage: a stage cut short keeps the earlier ones)
#   zoo        corpus models at batch 1 and 32 under the four frameworks    -> OUTDIR/zoo.csv
#              ($ZOO_MODELS and $ZOO_FRAMEWORKS, comma-separated, replace gpu_live.py's lists)
#   kernels    every kernel of one eager forward of the zoo's models, by aten op, and each
#              forward as a replayed CUDA graph (benchmarks/gpu_kernels.py) -> OUTDIR/kernels.csv
#              ($KERNELS_MODELS, comma-separated, replaces gpu_kernels.py's list)
#   hostops    each aten op of one eager forward of those models replayed alone, unprofiled:
#              host and device µs per call (benchmarks/gpu_hostops.py) -> OUTDIR/hostops.csv
# STAGES (default env,decode,calibrate,zoo; kernels and hostops on request) picks and orders them.
# inductor's generated code goes to OUTDIR/inductor-code.tar.gz, all output to OUTDIR/log.txt.
set -u
OUT=${1:?OUTDIR}
PY=${PY:-python3}
WORK=${WORK:-/tmp/gpu-live}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT" "$WORK"
LOG="$OUT/log.txt"

collect() { cp "$WORK"/*.csv "$WORK"/inductor-code.tar.gz "$OUT"/ 2>/dev/null; true; }

stage() {  # name, limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date -u +%T)) ===" >>"$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$LOG" 2>&1
  echo "=== $name: rc=$? in $((SECONDS - t0)) s ===" >>"$LOG"
  collect
}

run_env() {
  stage env 30 bash -c "nvidia-smi; $PY -c 'import torch, transformers, timm; print(torch.__version__, \
transformers.__version__, timm.__version__, torch.cuda.get_device_name(), \
torch.cuda.get_device_properties(0))'; nproc"
  cp "$LOG" "$OUT/env.txt"
}
run_calibrate() {
  # calibration/ is installed as ftmodel.calibration (pyproject's package-dir): without
  # installing, lay the package out that way in a scratch folder
  rm -rf "$WORK/pkg" && mkdir -p "$WORK/pkg" && cp -r ftmodel "$WORK/pkg/" \
    && cp -r calibration "$WORK/pkg/ftmodel/calibration"
  # PYTHONSAFEPATH: `python -m` would otherwise put the checkout (the working directory, whose
  # ftmodel/ has no calibration/) ahead of that folder
  stage calibrate "${CALIBRATE_S:-120}" env PYTHONSAFEPATH=1 PYTHONPATH="$WORK/pkg" "$PY" -m ftmodel calibrate \
    --device cuda ${CALIBRATE_ARGS---quick} --no-progress \
    --frameworks "${CALIBRATE_FRAMEWORKS:-eager,cudagraphs,inductor}" --threads 2 \
    --out "$OUT/gpu-profile.json"
}
STAGES=${STAGES:-env,decode,calibrate,zoo}
for name in ${STAGES//,/ }; do
  case $name in
    env) run_env ;;
    decode) stage decode "${DECODE_S:-230}" "$PY" benchmarks/gpu_live.py measure --stage decode \
              --out-dir "$WORK" ;;
    calibrate) run_calibrate ;;
    zoo) stage zoo "${ZOO_S:-300}" "$PY" benchmarks/gpu_live.py measure --stage zoo --out-dir "$WORK" \
           ${ZOO_MODELS:+--models "$ZOO_MODELS"} ${ZOO_FRAMEWORKS:+--frameworks "$ZOO_FRAMEWORKS"} ;;
    kernels) stage kernels "${KERNELS_S:-120}" "$PY" benchmarks/gpu_kernels.py measure \
               --out "$WORK/kernels.csv" ${KERNELS_MODELS:+--models "$KERNELS_MODELS"} ;;
    hostops) stage hostops "${HOSTOPS_S:-120}" "$PY" benchmarks/gpu_hostops.py measure \
               --out "$WORK/hostops.csv" ${KERNELS_MODELS:+--models "$KERNELS_MODELS"} ;;
    *) echo "unknown stage $name (env, decode, calibrate, zoo, kernels, hostops)" >&2; exit 2 ;;
  esac
done
tail -n 60 "$LOG"

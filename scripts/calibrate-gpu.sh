#!/usr/bin/env bash
# The one device check for calibration: run on a machine with an NVIDIA GPU, from the
# repository root, with $OUT pointing at a directory for the results (default ./calibrate-out).
#
#   1. finds the driver's CUDA version (nvidia-smi) and, for libnvrtc / libcublasLt /
#      libcublas, the library whose major version matches it (system, CUDA toolkits, pip
#      nvidia-* wheels), and puts links to those first on LD_LIBRARY_PATH: a CUDA 13 library
#      on a driver older than R580 cannot load its kernels;
#   2. builds servesim with --features cuda (unless $SERVESIM points at a built binary);
#   3. runs `servesim calibrate --check` (versions, symbols, module loads, each kernel against
#      its CPU reference) and stops if it fails;
#   4. runs `servesim calibrate` for every kernel (launch, stream, gemm, attention), part by
#      part under a time limit each, so a slow part cannot eat the whole budget;
#   5. runs `servesim fit` on the measurements against the profile of the measured GPU (named
#      in the measurement file's `# profile:` line, from the GPU's name; $BASE overrides it, and
#      the fitter refuses a base whose GPU disagrees with the measurements), and
#      `servesim validate-kernels` for the base and the fitted profile (PNG scatter plots).
# Everything lands in $OUT: libs.txt, build.log, check.txt, calibrate-*.log, measurements.csv,
# fitted.toml, fit.txt, validate-*.txt/png, summary.txt. Designed to finish well under 10
# minutes on an H100/H200.
#
#   scripts/calibrate-gpu.sh --pick-lib LIB MAJOR PATH...
# prints the PATH the script would use for LIB on a driver of CUDA major version MAJOR (the
# selection rule of step 1, tested by tests/calibrate_cli.rs).
set -uo pipefail

# The library of `lib` to use with a CUDA `major` driver among `paths` (files named
# lib.so.N[.x...]): one of major N = `major` if any, else the newest N below it; none newer.
pick_lib() {
  local lib="$1" major="$2"; shift 2
  local best="" best_major=-1 p n
  for p in "$@"; do
    n="${p##*/$lib.so.}"
    [ "$n" = "$p" ] && continue
    n="${n%%.*}"
    case "$n" in ''|*[!0-9]*) continue;; esac
    if [ "$n" -le "$major" ] && [ "$n" -gt "$best_major" ]; then best="$p"; best_major="$n"; fi
  done
  [ -n "$best" ] && echo "$best"
}

if [ "${1:-}" = "--pick-lib" ]; then
  shift
  pick_lib "$@"
  exit $?
fi

OUT="${OUT:-./calibrate-out}"
MODELS="${MODELS:-llama-3.1-8b llama-3.1-70b}"
mkdir -p "$OUT"
: > "$OUT/summary.txt"
start=$(date +%s)
log() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$OUT/summary.txt"; }

# --- 1. driver and libraries ----------------------------------------------------------------
{
  echo "# nvidia-smi"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
  nvidia-smi 2>/dev/null | grep -m1 "CUDA Version" || true
  echo "# ldconfig"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libcublas' || echo "(none in ldconfig)"
  echo "# python wheels"
  for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null); do
    ls -d "$d"/nvidia/*/lib 2>/dev/null
  done
  echo "# CUDA toolkits"
  ls -d /usr/local/cuda*/lib64 2>/dev/null
} > "$OUT/libs.txt" 2>&1

# The driver's CUDA version: nvidia-smi's header ("CUDA Version: 12.4"), else from the driver
# branch (R580 and later: CUDA 13).
cuda_ver=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9]*\).*/\1/p' | head -1)
if [ -z "$cuda_ver" ]; then
  drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  if [ -n "$drv" ] && [ "${drv%%.*}" -ge 580 ] 2>/dev/null; then cuda_ver=13.0; else cuda_ver=12.0; fi
fi
cuda_major="${cuda_ver%%.*}"
log "driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), CUDA $cuda_ver"

candidates() {  # every file named $1.so.N* the system, the toolkits or pip wheels hold
  {
    ldconfig -p 2>/dev/null | awk -v l="$1.so." 'index($1, l) == 1 {print $NF}'
    ls /usr/local/cuda*/lib64/"$1".so.* /usr/lib/x86_64-linux-gnu/"$1".so.* 2>/dev/null
    for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null); do
      ls "$d"/nvidia/*/lib/"$1".so.* 2>/dev/null
    done
  } | sort -u
}
shim="$OUT/.libshim"; rm -rf "$shim"; mkdir -p "$shim"
extra_dirs=""
for lib in libnvrtc libcublasLt libcublas; do
  # shellcheck disable=SC2046
  chosen=$(pick_lib "$lib" "$cuda_major" $(candidates "$lib"))
  if [ -z "$chosen" ]; then
    log "$lib: NOT FOUND for CUDA $cuda_major (pip install nvidia-cuda-nvrtc-cu$cuda_major nvidia-cublas-cu$cuda_major)"
    continue
  fi
  n="${chosen##*/$lib.so.}"; n="${n%%.*}"
  # cudarc tries lib.so first, servesim's NVRTC loader lib.so.<driver major>: both lead here.
  ln -sf "$(readlink -f "$chosen")" "$shim/$lib.so"
  ln -sf "$(readlink -f "$chosen")" "$shim/$lib.so.$n"
  extra_dirs="$extra_dirs:$(dirname "$(readlink -f "$chosen")")"
  log "$lib: $chosen (CUDA $n)"
done
export LD_LIBRARY_PATH="$shim$extra_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$OUT/libs.txt"

# --- 2. build ------------------------------------------------------------------------------
BIN="${SERVESIM:-}"
if [ -z "$BIN" ]; then
  log "building servesim --features cuda"
  if ! timeout 300 cargo build --release --features cuda > "$OUT/build.log" 2>&1; then
    log "build failed (see build.log)"; tail -20 "$OUT/build.log"; exit 1
  fi
  BIN="${CARGO_TARGET_DIR:-target}/release/servesim"
fi
model_flags=""; for m in $MODELS; do model_flags="$model_flags --model $m"; done

# --- 3. check ------------------------------------------------------------------------------
log "calibrate --check"
timeout 120 "$BIN" calibrate --check > "$OUT/check.txt" 2>&1
rc=$?
cat "$OUT/check.txt"
if [ $rc -ne 0 ]; then
  log "check failed (exit $rc): see check.txt"; rm -rf "$shim"; exit 1
fi

# --- 4. calibrate, part by part --------------------------------------------------------------
: > "$OUT/measurements.csv"
part_limit() { case "$1" in stream) echo 90;; gemm) echo 180;; attention) echo 120;; *) echo 30;; esac; }
first=1
for part in launch stream gemm attention; do
  log "calibrate --only $part"
  # shellcheck disable=SC2086
  timeout "$(part_limit "$part")" "$BIN" calibrate $model_flags --only "$part" \
      --out "$OUT/part-$part.csv" > "$OUT/calibrate-$part.log" 2>&1
  rc=$?
  log "  exit $rc; $(tail -1 "$OUT/calibrate-$part.log")"
  if [ $rc -eq 0 ] && [ -s "$OUT/part-$part.csv" ]; then
    if [ $first -eq 1 ]; then cat "$OUT/part-$part.csv" >> "$OUT/measurements.csv"; first=0
    else grep -v -e '^# servesim' -e '^# device' -e '^# profile' -e '^# format' -e '^kernel,' \
        "$OUT/part-$part.csv" >> "$OUT/measurements.csv"; fi
  fi
done

# --- 5. fit and validate -------------------------------------------------------------------
if [ $first -eq 0 ]; then
  profile=$(sed -n 's/^# profile: *//p' "$OUT/measurements.csv" | head -1)
  if [ -z "${BASE:-}" ] && [ -n "$profile" ] && [ "$profile" != "none" ]; then
    BASE="calibration/gpus/$profile.toml"
  fi
  if [ -z "${BASE:-}" ]; then
    log "no profile matches this GPU's name: set BASE=calibration/gpus/<profile>.toml to fit"
  else
    log "fit against $BASE"
    "$BIN" fit "$OUT/measurements.csv" --base "$BASE" --out "$OUT/fitted.toml" > "$OUT/fit.txt" 2>&1
    log "fit exit $?"; cat "$OUT/fit.txt"
    "$BIN" validate-kernels --gpu "$BASE" --measurements "$OUT/measurements.csv" \
        --plot "$OUT/validate-base.png" > "$OUT/validate-base.txt" 2>&1
    log "validate (base) exit $?"; cat "$OUT/validate-base.txt"
    if [ -s "$OUT/fitted.toml" ]; then
      "$BIN" validate-kernels --gpu "$OUT/fitted.toml" --measurements "$OUT/measurements.csv" \
          --plot "$OUT/validate-fitted.png" > "$OUT/validate-fitted.txt" 2>&1
      log "validate (fitted) exit $?"; cat "$OUT/validate-fitted.txt"
    fi
  fi
else
  log "no measurements: see calibrate-*.log"
fi
rm -rf "$shim"
log "done"

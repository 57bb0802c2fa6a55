#!/usr/bin/env bash
# The one device check for calibration: run on a machine with an NVIDIA GPU, from the
# repository root, with $OUT pointing at a directory for the results (default ./calibrate-out).
#
#   1. reports where libcuda / libnvrtc / libcublas(Lt) were found (and adds pip-installed
#      nvidia-* wheels' lib directories to LD_LIBRARY_PATH when the system has none);
#   2. builds servesim with --features cuda (unless $SERVESIM points at a built binary);
#   3. runs `servesim calibrate` for every kernel (stream, gemm, attention, launch), part by
#      part under a time limit each, so a slow part cannot eat the whole budget;
#   4. runs `servesim fit` on the measurements (base: the H100 profile, or $BASE) and
#      `servesim validate-kernels` for the base and the fitted profile (PNG scatter plots).
# Everything lands in $OUT: libs.txt, build.log, calibrate-*.log, measurements.csv, fitted.toml,
# fit.txt, validate-*.txt/png. Designed to finish well under 10 minutes on an H100/H200.
set -uo pipefail

OUT="${OUT:-./calibrate-out}"
BASE="${BASE:-calibration/gpus/h100-sxm.toml}"
MODELS="${MODELS:-llama-3.1-8b llama-3.1-70b}"
mkdir -p "$OUT"
start=$(date +%s)
log() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$OUT/summary.txt"; }

# --- 1. libraries ------------------------------------------------------------------------
{
  echo "# nvidia-smi"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
  echo "# ldconfig"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libcublas' || echo "(none in ldconfig)"
  echo "# python wheels"
  for d in $(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null); do
    ls -d "$d"/nvidia/*/lib 2>/dev/null
  done
  echo "# CUDA toolkits"
  ls -d /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu 2>/dev/null
} > "$OUT/libs.txt" 2>&1

for lib in libnvrtc libcublasLt libcublas; do
  if ! ldconfig -p 2>/dev/null | grep -q "$lib\.so"; then
    found=$( (find /usr/local/cuda*/lib64 /usr/lib /opt 2>/dev/null; \
              python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null \
                | xargs -I{} find {}/nvidia -maxdepth 3 2>/dev/null) \
             | grep -E "/$lib\.so(\.[0-9]+)*$" | head -1)
    if [ -n "$found" ]; then
      export LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
done
# cudarc looks for lib<name>.so and a few versioned names; an unversioned link helps wheels.
shim="$OUT/.libshim"; mkdir -p "$shim"
for lib in libnvrtc libcublasLt libcublas; do
  for d in $(echo "${LD_LIBRARY_PATH:-}" | tr : " "); do
    f=$(ls "$d"/$lib.so.* 2>/dev/null | head -1)
    if [ -n "$f" ] && [ ! -e "$d/$lib.so" ]; then ln -sf "$f" "$shim/$lib.so"; fi
  done
done
export LD_LIBRARY_PATH="$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$OUT/libs.txt"
for lib in libcuda.so libnvrtc.so libcublasLt.so libcublas.so; do
  where=$(ldconfig -p 2>/dev/null | grep -m1 "$lib" | awk '{print $NF}')
  [ -z "$where" ] && for d in $(echo "${LD_LIBRARY_PATH:-}" | tr : " "); do
    [ -e "$d/$lib" ] && where="$d/$lib" && break
  done
  log "$lib: ${where:-NOT FOUND}"
done

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

# --- 3. calibrate, part by part --------------------------------------------------------------
: > "$OUT/measurements.csv"
part_limit() { case "$1" in stream) echo 90;; gemm) echo 180;; attention) echo 120;; *) echo 30;; esac; }
first=1
for part in launch stream gemm attention; do
  log "calibrate --only $part"
  timeout "$(part_limit "$part")" "$BIN" calibrate $model_flags --only "$part" \
      --out "$OUT/part-$part.csv" > "$OUT/calibrate-$part.log" 2>&1
  rc=$?
  log "  exit $rc; $(tail -1 "$OUT/calibrate-$part.log")"
  if [ $rc -eq 0 ] && [ -s "$OUT/part-$part.csv" ]; then
    if [ $first -eq 1 ]; then cat "$OUT/part-$part.csv" >> "$OUT/measurements.csv"; first=0
    else grep -v -e '^#' -e '^kernel,' "$OUT/part-$part.csv" >> "$OUT/measurements.csv"; fi
  fi
done

# --- 4. fit and validate -------------------------------------------------------------------
if [ $first -eq 0 ]; then
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
else
  log "no measurements: see calibrate-*.log"
fi
rm -rf "$shim"
log "done"

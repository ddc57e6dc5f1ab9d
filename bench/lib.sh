# Shell helpers shared by the bench scripts (sourced, not run).

# Prints the Markdown lines that say where and when a table was measured.
print_machine() {
  echo "- Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),"\
       "$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory"
  echo "- Load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
}

# Sets LAUNCH to BUILD_DIR/bin/pstrain-launch, or exits with a message when it is not built.
# Usage: find_launcher "$0" BUILD_DIR
find_launcher() {
  [[ -d "$2" ]] || { echo "$1: build folder $2 not found; build first (cmake -S . -B $2 && cmake --build $2)" >&2; exit 1; }
  LAUNCH="$(cd "$2" && pwd)/bin/pstrain-launch"
  [[ -x "$LAUNCH" ]] || { echo "$1: $LAUNCH not found; build it first (cmake --build $2)" >&2; exit 1; }
}

# find_launcher, then checks that each of the other binaries named is built; sets BIN to their folder.
# Usage: find_binaries "$0" BUILD_DIR NAME...
find_binaries() {
  local script="$1" build="$2"
  shift 2
  find_launcher "$script" "$build"
  BIN="$(dirname "$LAUNCH")"
  local b
  for b in "$@"; do
    [[ -x "$BIN/$b" ]] || { echo "$script: $BIN/$b not found; build it first (cmake --build $build --target $b)" >&2; exit 1; }
  done
}

# Sets DATA to GIVEN, when set, or to CTR data that pstrain-gen-ctr generates now into $OUT/data
# with the flags that follow (removed when the script exits); sets GEN to what a table's caption
# says of it. Needs BIN (find_binaries) and OUT.
# Usage: ctr_data_or_generate "$0" GIVEN GEN_CTR_FLAG...
ctr_data_or_generate() {
  local script="$1" given="$2"
  shift 2
  if [[ -n "$given" ]]; then
    DATA="$given"
    GEN="given ($given)"
    return
  fi
  DATA="$OUT/data"
  trap 'rm -rf "$DATA"' EXIT
  "$BIN/pstrain-gen-ctr" --out_dir="$DATA" "$@" > "$OUT/gen.log" 2>&1 \
    || { echo "$script: pstrain-gen-ctr failed, see $OUT/gen.log" >&2; exit 1; }
  GEN="\`pstrain-gen-ctr $*\`: $(tail -1 "$OUT/gen.log")"
}

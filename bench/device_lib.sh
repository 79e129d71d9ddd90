# Sourced by the bench/device_*.sh scripts (the device machine, run from the repository root).
# stamp COMMAND...: the header every device log starts with (device, clocks, date, commit, the command that ran).
stamp() {
  echo "# device: $(nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem --format=csv,noheader \
    2>/dev/null | tr '\n' ';') CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# commit: $(git rev-parse HEAD 2>/dev/null || cat .git-head 2>/dev/null || echo unknown)"  # a stale .git-head can linger there
  echo "# command: $*"
}

# install_wheels [LOG] [WHEEL...]: the pinned wheels carried in .whl (scripts/fetch-device-wheels.sh; default: all of
# them) into /tmp/site, then PYTHONPATH=/tmp/site:$PWD. With LOG, pip's output is appended there and its tail shown
# on failure. Returns 1 when pip fails (the caller decides whether that ends the run).
install_wheels() {
  local log=${1:-}
  [ $# -gt 0 ] && shift
  local wheels=("$@")
  [ ${#wheels[@]} -gt 0 ] || wheels=(.whl/*.whl)
  local pip=("${PY:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site)
  if [ -n "$log" ]; then
    "${pip[@]}" "${wheels[@]}" >> "$log" 2>&1 || { echo "pip install failed"; tail -5 "$log"; return 1; }
  else
    "${pip[@]}" "${wheels[@]}" || { echo "pip install failed"; return 1; }
  fi
  export PYTHONPATH=/tmp/site:$PWD
}

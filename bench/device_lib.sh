# Sourced by the bench/device_*.sh scripts (the device machine, run from the repository root).
# stamp COMMAND...: the header every device log starts with (device, clocks, date, commit, the command that ran).
stamp() {
  echo "# device: $(nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem --format=csv,noheader \
    2>/dev/null | tr '\n' ';') CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# commit: $(git rev-parse HEAD 2>/dev/null || cat .git-head 2>/dev/null || echo unknown)"  # a stale .git-head can linger there
  echo "# command: $*"
}

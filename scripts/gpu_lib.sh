# Sourced by the GPU-machine scripts after gpu_env.sh, with T (the tessel binary) and G (the target
# description) set: the helpers they share.
#   tessel_verify FILE DEF SHAPE [TILES]  one `tessel run` of workloads/FILE, one line: the verdict
#                                         (verified / MISMATCH / the error) and the CUDA-graph time
#   tessel_sanitize "TOOLS" SPEC...       compute-sanitizer (each tool) on `tessel run` of each SPEC
#                                         ("FILE DEF SHAPE TILES"), one line per run: the tool's
#                                         summary and whether the run still verified
tessel_verify() {
  local r; r=$(timeout 120 $T run workloads/$1 --def $2 --target $G --shape $3 ${4:+--gpu-tiles $4} 2>&1)
  echo "$2 $3 ${4:-default}: $(echo "$r" | grep -oE 'verified[^,]*|MISMATCH.*|error.*' | head -1) $(echo "$r" | grep -oE '[0-9.]+ us/call in a CUDA graph' | head -1)"
}
tessel_sanitize() {
  local tools=$1 tool spec r w; shift
  local specs=("$@")
  for tool in $tools; do
    for spec in "${specs[@]}"; do
      read -r -a w <<< "$spec"  # file def shape tiles
      r=$(timeout 200 compute-sanitizer --tool $tool --print-limit 5 $T run workloads/${w[0]} --def ${w[1]} --target $G --shape ${w[2]} --gpu-tiles ${w[3]} --no-timing 2>&1)
      echo "$tool ${w[1]} ${w[2]} ${w[3]}: $(echo "$r" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tr '\n' ' ') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
    done
  done
}

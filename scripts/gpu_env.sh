# Sourced by the GPU-machine scripts with D set to the carried pack (BUILD/dev, scripts/gpu_pack.sh):
# the pack's libraries, then the CUDA libraries of the machine's Python wheels (cuDNN, cuBLAS, NVRTC,
# runtime) on LD_LIBRARY_PATH, and the pack's primed NVRTC cache.
export LD_LIBRARY_PATH=$PWD/$D/lib:${LD_LIBRARY_PATH:-}
for m in cudnn cublas cuda_nvrtc cuda_runtime cu13; do
  p=$(python3 -c "import importlib,os; m=importlib.import_module('nvidia.$m'); print(os.path.join(list(m.__path__)[0],'lib'))" 2>/dev/null) && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$p
done
export TESSEL_CACHE_DIR=$PWD/$D/nvrtc-cache

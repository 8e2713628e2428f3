#include "gpu_backend/cudnn_conv.h"

#include <cstring>

#include "gpu_backend/error.h"
#include "isa/base/error.h"

namespace tessel::gpu {
namespace {

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
  }
}

void validate(const ConvShape& s) {
  const bool ok = s.n > 0 && s.h > 0 && s.w > 0 && s.c > 0 && s.k > 0 && s.r > 0 && s.s > 0 && s.pad_h >= 0 &&
                  s.pad_w >= 0 && s.stride_h > 0 && s.stride_w > 0 && s.dilation_h > 0 && s.dilation_w > 0 &&
                  s.out_h() > 0 && s.out_w() > 0;
  if (!ok)
    throw UserError("cuDNN convolution shape N=" + std::to_string(s.n) + " H=" + std::to_string(s.h) +
                    " W=" + std::to_string(s.w) + " C=" + std::to_string(s.c) + " K=" + std::to_string(s.k) +
                    " R=" + std::to_string(s.r) + " S=" + std::to_string(s.s) +
                    ": sizes and strides must be positive, padding non-negative, and the output non-empty");
}

}  // namespace

std::vector<uint8_t> filter_rsck_to_krsc(const std::vector<uint8_t>& rsck, const ConvShape& s, size_t eb) {
  const size_t count = size_t(s.r) * s.s * s.c * s.k;
  TESSEL_CHECK(rsck.size() == count * eb, "filter_rsck_to_krsc: the filter holds " + std::to_string(rsck.size()) +
                                              " bytes, R*S*C*K*element = " + std::to_string(count * eb));
  std::vector<uint8_t> krsc(rsck.size());
  for (int r = 0; r < s.r; ++r)
    for (int q = 0; q < s.s; ++q)
      for (int c = 0; c < s.c; ++c)
        for (int k = 0; k < s.k; ++k) {
          const size_t from = ((size_t(r) * s.s + q) * s.c + c) * s.k + k;
          const size_t to = ((size_t(k) * s.r + r) * s.s + q) * s.c + c;
          std::memcpy(&krsc[to * eb], &rsck[from * eb], eb);
        }
  return krsc;
}

CudnnConv::CudnnConv(const ConvShape& s) : shape_(s) {
  validate(s);
  TESSEL_CUDNN(cudnnCreate(&handle_));
  TESSEL_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
  TESSEL_CUDNN(cudnnCreateTensorDescriptor(&y_desc_));
  TESSEL_CUDNN(cudnnCreateFilterDescriptor(&w_desc_));
  TESSEL_CUDNN(cudnnCreateConvolutionDescriptor(&conv_desc_));
  TESSEL_CUDNN(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, s.n, s.c, s.h, s.w));
  TESSEL_CUDNN(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, s.k, s.c, s.r, s.s));
  TESSEL_CUDNN(cudnnSetConvolution2dDescriptor(conv_desc_, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dilation_h,
                                               s.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TESSEL_CUDNN(cudnnSetConvolutionMathType(conv_desc_, CUDNN_TENSOR_OP_MATH));
  int n = 0, k = 0, p = 0, q = 0;
  TESSEL_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &n, &k, &p, &q));
  TESSEL_CHECK(n == s.n && k == s.k && p == s.out_h() && q == s.out_w(),
               "ConvShape::out_h/out_w disagree with cuDNN's output dimensions");
  TESSEL_CUDNN(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, n, k, p, q));

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  TESSEL_CUDNN(cudnnFindConvolutionForwardAlgorithm(handle_, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  int best = -1;
  for (int i = 0; i < returned && best < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) best = i;  // sorted fastest first
  if (best < 0) throw GpuError("cudnnFindConvolutionForwardAlgorithm", "no algorithm runs this convolution");
  algo_ = perf[best].algo;
  math_type_ = perf[best].mathType;
  TESSEL_CUDNN(cudnnSetConvolutionMathType(conv_desc_, math_type_));
  workspace_ = DeviceBuffer(perf[best].memory);
}

CudnnConv::~CudnnConv() {
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  if (handle_) cudnnDestroy(handle_);
}

void CudnnConv::run(CUstream stream, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y) const {
  const float alpha = 1.0f, beta = 0.0f;
  TESSEL_CUDNN(cudnnSetStream(handle_, reinterpret_cast<cudaStream_t>(stream)));
  TESSEL_CUDNN(cudnnConvolutionForward(handle_, &alpha, x_desc_, reinterpret_cast<const void*>(x), w_desc_,
                                       reinterpret_cast<const void*>(w), conv_desc_, algo_,
                                       reinterpret_cast<void*>(workspace_.ptr()), workspace_.size(), &beta, y_desc_,
                                       reinterpret_cast<void*>(y)));
}

std::string CudnnConv::algorithm_name() const {
  return std::string(algo_name(algo_)) + (math_type_ == CUDNN_DEFAULT_MATH ? " (default math)" : " (tensor ops)");
}

}  // namespace tessel::gpu

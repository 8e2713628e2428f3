// cuDNN baseline: 2-D convolution forward (cross-correlation, as the tessel conv2d workloads), NHWC
// f16 input, f16 filter in cuDNN's NHWC filter layout KRSC, f16 output, f32 compute on tensor cores.
//
// API used: cuDNN 9's legacy convolution API (cudnn_cnn.h: cudnnFindConvolutionForwardAlgorithm +
// cudnnConvolutionForward). cuDNN 9 marks it deprecated but still ships it, and it is implemented
// over the same engines as the graph (backend) API; the Find call times every algorithm on this
// device and the fastest that succeeds is kept. cuDNN's PSEUDO_HALF configuration (f16 tensors,
// f32 accumulation) has no f32 output: Y is f16 where the tessel conv2d workload writes f32.
#pragma once

#include <cuda.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_backend/runtime.h"

namespace tessel::gpu {

struct ConvShape {
  int n = 0, h = 0, w = 0, c = 0;  // input NHWC
  int k = 0, r = 0, s = 0;         // output channels, filter height and width
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int out_h() const { return (h + 2 * pad_h - dilation_h * (r - 1) - 1) / stride_h + 1; }
  int out_w() const { return (w + 2 * pad_w - dilation_w * (s - 1) - 1) / stride_w + 1; }
  double flops() const { return 2.0 * n * out_h() * out_w() * double(k) * c * r * s; }
};

// Filter RSCK (the tessel conv2d_nhwc layout) -> KRSC (cuDNN's NHWC filter layout), any element
// type of `element_bytes` bytes.
std::vector<uint8_t> filter_rsck_to_krsc(const std::vector<uint8_t>& rsck, const ConvShape& s, size_t element_bytes);

class CudnnConv {
 public:
  // Creates the handle and descriptors, and picks the fastest algorithm by running each once on
  // scratch buffers. Throws UserError for an invalid shape, GpuError when cuDNN fails.
  explicit CudnnConv(const ConvShape& shape);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // Enqueues Y = conv(X, W) on `stream`: x N*H*W*C f16, w K*R*S*C f16, y N*P*Q*K f16.
  void run(CUstream stream, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y) const;

  std::string algorithm_name() const;  // "IMPLICIT_PRECOMP_GEMM (tensor ops)"
  size_t workspace_bytes() const { return workspace_.size(); }
  const ConvShape& shape() const { return shape_; }

 private:
  ConvShape shape_;
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math_type_ = CUDNN_DEFAULT_MATH;
  DeviceBuffer workspace_;
};

}  // namespace tessel::gpu

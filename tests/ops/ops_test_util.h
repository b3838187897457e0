// Helpers for the kernel tests: seeded random data and row-wise quantization
// of whole matrices.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/dtype.h"
#include "backend/quant.h"

namespace kvlm::test {

// n values from N(mean, stddev^2); never all zero, reproducible per seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float stddev = 1.f, float mean = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Quantizes a [rows, cols] f32 matrix row by row into `t`.
inline std::vector<uint8_t> quantize_matrix(DType t, const std::vector<float>& m, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, m.data() + r * cols, out.data() + r * rb, cols);
  return out;
}

// Dequantizes a [rows, cols] matrix of `t` into f32.
inline std::vector<float> dequantize_matrix(DType t, const void* data, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t, static_cast<const uint8_t*>(data) + r * rb, out.data() + r * cols, cols);
  }
  return out;
}

// sqrt(sum (a - b)^2 / sum b^2): error of a relative to the signal b.
inline double normalized_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace kvlm::test

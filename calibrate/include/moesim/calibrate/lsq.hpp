#pragma once
// Linear least squares through LAPACK (OpenBLAS's bundled LAPACK): the one solver every fit in calibrate/
// uses, from a straight line through ping-pong samples to a damped Gauss-Newton step of `calibrate fit`.

#include <cstddef>
#include <vector>

namespace moesim::calibrate {

/// A dense matrix, row-major (rows × cols).
struct Matrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<double> data;

  Matrix() = default;
  Matrix(std::size_t r, std::size_t c) : rows(r), cols(c), data(r * c, 0.0) {}
  double& operator()(std::size_t r, std::size_t c) { return data[r * cols + c]; }
  double operator()(std::size_t r, std::size_t c) const { return data[r * cols + c]; }
};

struct LeastSquares {
  std::vector<double> x;  ///< the minimiser of |A x - b|_2 (minimum-norm when A is rank deficient)
  std::size_t rank = 0;   ///< effective rank of A (singular values above rcond × the largest)
};

/// Solves min |A x - b|_2 with LAPACK dgelsd (SVD, so rank-deficient systems get the minimum-norm
/// solution and report their rank). A has at least one row and one column; b has A.rows entries.
LeastSquares least_squares(const Matrix& a, const std::vector<double>& b, double rcond = 1e-10);

/// y = intercept + slope × x fitted by least squares (optionally weighted), with the coefficient of
/// determination and each sample's residual (y - fitted).
struct LineFit {
  double intercept = 0;
  double slope = 0;
  double r2 = 0;  ///< 1 - SS_res / SS_tot (1 when every y is equal and fitted exactly)
  std::vector<double> residuals;
};

/// Needs at least two samples with distinct x. `weights` (empty: all 1) scale each squared residual.
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& weights = {});

}  // namespace moesim::calibrate

namespace moesim::calibrate {

/// min |A x - b|_2 subject to x >= 0 (Lawson and Hanson's active-set NNLS): the columns left at 0 are
/// those whose gradient at the optimum points outward. UserError-free: an empty or all-zero A gives x = 0.
std::vector<double> nonnegative_least_squares(const Matrix& a, const std::vector<double>& b);

}  // namespace moesim::calibrate

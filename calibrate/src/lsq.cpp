#include "moesim/calibrate/lsq.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "moesim/model/error.hpp"

// LAPACK's Fortran interface, as OpenBLAS exports it (column-major, arguments by pointer).
extern "C" void dgelsd_(const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b,
                        const int* ldb, double* s, const double* rcond, int* rank, double* work, const int* lwork,
                        int* iwork, int* info);

namespace moesim::calibrate {

LeastSquares least_squares(const Matrix& a, const std::vector<double>& b, double rcond) {
  if (a.rows == 0 || a.cols == 0 || b.size() != a.rows) {
    throw std::invalid_argument("least_squares: A is " + std::to_string(a.rows) + "x" + std::to_string(a.cols) +
                                ", b has " + std::to_string(b.size()) + " entries");
  }
  const int m = static_cast<int>(a.rows);
  const int n = static_cast<int>(a.cols);
  const int nrhs = 1;
  const int ldb = std::max(m, n);
  std::vector<double> col(a.rows * a.cols);
  for (std::size_t r = 0; r < a.rows; ++r)
    for (std::size_t c = 0; c < a.cols; ++c) col[c * a.rows + r] = a(r, c);
  std::vector<double> rhs(static_cast<std::size_t>(ldb), 0.0);
  std::copy(b.begin(), b.end(), rhs.begin());
  std::vector<double> s(static_cast<std::size_t>(std::min(m, n)));
  int rank = 0;
  int info = 0;
  // Workspace query, then the solve.
  int lwork = -1;
  double wq = 0;
  int iwq = 0;
  dgelsd_(&m, &n, &nrhs, col.data(), &m, rhs.data(), &ldb, s.data(), &rcond, &rank, &wq, &lwork, &iwq, &info);
  if (info != 0) throw std::runtime_error("LAPACK dgelsd workspace query failed, info " + std::to_string(info));
  lwork = static_cast<int>(wq);
  std::vector<double> work(static_cast<std::size_t>(std::max(lwork, 1)));
  std::vector<int> iwork(static_cast<std::size_t>(std::max(iwq, 1)));
  dgelsd_(&m, &n, &nrhs, col.data(), &m, rhs.data(), &ldb, s.data(), &rcond, &rank, work.data(), &lwork, iwork.data(),
          &info);
  if (info != 0) throw std::runtime_error("LAPACK dgelsd did not converge, info " + std::to_string(info));
  LeastSquares out;
  out.x.assign(rhs.begin(), rhs.begin() + n);
  out.rank = static_cast<std::size_t>(rank);
  return out;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& weights) {
  if (x.size() != y.size() || x.size() < 2 || (!weights.empty() && weights.size() != x.size())) {
    throw std::invalid_argument("fit_line: needs at least two (x, y) samples and one weight per sample");
  }
  if (std::all_of(x.begin(), x.end(), [&](double v) { return v == x.front(); })) {
    throw std::invalid_argument("fit_line: every x is equal; a line needs two distinct x");
  }
  Matrix a(x.size(), 2);
  std::vector<double> b(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = weights.empty() ? 1.0 : std::sqrt(weights[i]);
    a(i, 0) = w;
    a(i, 1) = w * x[i];
    b[i] = w * y[i];
  }
  const LeastSquares ls = least_squares(a, b);
  LineFit f;
  f.intercept = ls.x[0];
  f.slope = ls.x[1];
  double wsum = 0, mean = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    wsum += w;
    mean += w * y[i];
  }
  mean /= wsum;
  double ss_res = 0, ss_tot = 0;
  f.residuals.resize(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    f.residuals[i] = y[i] - (f.intercept + f.slope * x[i]);
    ss_res += w * f.residuals[i] * f.residuals[i];
    ss_tot += w * (y[i] - mean) * (y[i] - mean);
  }
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : 0.0);
  return f;
}

}  // namespace moesim::calibrate

namespace moesim::calibrate {

std::vector<double> nonnegative_least_squares(const Matrix& a, const std::vector<double>& b) {
  MOESIM_CHECK(a.cols <= 8, "nonnegative_least_squares enumerates column subsets: at most 8 columns");
  MOESIM_CHECK(b.size() == a.rows, "nonnegative_least_squares: b must have one entry per row of A");
  std::vector<double> best(a.cols, 0.0);
  double best_residual = 0;
  for (std::size_t i = 0; i < a.rows; ++i) best_residual += b[i] * b[i];  // x = 0
  if (a.rows == 0) return best;
  for (std::size_t mask = 1; mask < (std::size_t{1} << a.cols); ++mask) {
    std::vector<std::size_t> cols;
    for (std::size_t c = 0; c < a.cols; ++c)
      if (mask & (std::size_t{1} << c)) cols.push_back(c);
    Matrix sub(a.rows, cols.size());
    for (std::size_t r = 0; r < a.rows; ++r)
      for (std::size_t j = 0; j < cols.size(); ++j) sub(r, j) = a(r, cols[j]);
    const LeastSquares s = least_squares(sub, b);
    if (s.rank < cols.size()) continue;  // these columns cannot be told apart by the rows
    bool feasible = true;
    for (const double v : s.x) feasible = feasible && v >= 0;
    if (!feasible) continue;
    double residual = 0;
    for (std::size_t r = 0; r < a.rows; ++r) {
      double fit = 0;
      for (std::size_t j = 0; j < cols.size(); ++j) fit += sub(r, j) * s.x[j];
      residual += (fit - b[r]) * (fit - b[r]);
    }
    if (residual < best_residual) {
      best_residual = residual;
      std::fill(best.begin(), best.end(), 0.0);
      for (std::size_t j = 0; j < cols.size(); ++j) best[cols[j]] = s.x[j];
    }
  }
  return best;
}

}  // namespace moesim::calibrate

#include "moesim/calibrate/lsq.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
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

namespace {

/// A x − b.
std::vector<double> residual_of(const Matrix& a, const std::vector<double>& x, const std::vector<double>& b) {
  std::vector<double> r(a.rows);
  for (std::size_t i = 0; i < a.rows; ++i) {
    double v = -b[i];
    for (std::size_t c = 0; c < a.cols; ++c) v += a(i, c) * x[c];
    r[i] = v;
  }
  return r;
}

/// The unconstrained least-squares solution on the columns `p` (the others 0); nullopt where those columns
/// cannot be told apart by the rows.
std::optional<std::vector<double>> solve_on(const Matrix& a, const std::vector<double>& b,
                                            const std::vector<std::size_t>& p) {
  Matrix sub(a.rows, p.size());
  for (std::size_t r = 0; r < a.rows; ++r)
    for (std::size_t j = 0; j < p.size(); ++j) sub(r, j) = a(r, p[j]);
  const LeastSquares s = least_squares(sub, b);
  if (s.rank < p.size()) return std::nullopt;
  std::vector<double> z(a.cols, 0.0);
  for (std::size_t j = 0; j < p.size(); ++j) z[p[j]] = s.x[j];
  return z;
}

}  // namespace

std::vector<double> nonnegative_least_squares(const Matrix& in, const std::vector<double>& b) {
  MOESIM_CHECK(b.size() == in.rows, "nonnegative_least_squares: b must have one entry per row of A");
  std::vector<double> x(in.cols, 0.0);
  if (in.rows == 0 || in.cols == 0) return x;
  // Lawson and Hanson's active-set method (Solving Least Squares Problems, 1974, ch. 23, algorithm NNLS):
  // columns enter the passive set P by the largest gradient −Aᵀ(Ax − b); where the unconstrained solution
  // on P has a component <= 0, x moves toward it until the first one reaches 0 and leaves P. The problem
  // is convex, so the point where no column outside P has a positive gradient is the optimum. The columns
  // are scaled to unit norm first (a fit's columns differ by orders of magnitude: seconds per byte beside
  // kernel counts), so that one tolerance serves them all; x is scaled back at the end.
  Matrix a = in;
  std::vector<double> norm(a.cols, 0.0);
  for (std::size_t c = 0; c < a.cols; ++c) {
    for (std::size_t i = 0; i < a.rows; ++i) norm[c] += a(i, c) * a(i, c);
    norm[c] = std::sqrt(norm[c]);
    if (norm[c] > 0)
      for (std::size_t i = 0; i < a.rows; ++i) a(i, c) /= norm[c];
  }
  double b_norm = 0;
  for (double v : b) b_norm += v * v;
  const double tol = 1e-12 * std::max(std::sqrt(b_norm), 1e-300);
  std::vector<bool> passive(a.cols, false), barred(a.cols, false);
  const std::size_t max_iterations = 30 * a.cols + 30;
  for (std::size_t it = 0; it < max_iterations; ++it) {
    const std::vector<double> r = residual_of(a, x, b);
    std::size_t t = a.cols;
    double best = tol;
    for (std::size_t c = 0; c < a.cols; ++c) {
      if (passive[c] || barred[c]) continue;
      double w = 0;
      for (std::size_t i = 0; i < a.rows; ++i) w -= a(i, c) * r[i];
      if (w > best) {
        best = w;
        t = c;
      }
    }
    if (t == a.cols) break;
    passive[t] = true;
    bool entered = false;
    for (std::size_t inner = 0; inner < max_iterations; ++inner) {
      std::vector<std::size_t> p;
      for (std::size_t c = 0; c < a.cols; ++c)
        if (passive[c]) p.push_back(c);
      const std::optional<std::vector<double>> z = solve_on(a, b, p);
      if (!z) {
        // The entering column is a combination of those in P: it cannot lower the residual; never again.
        passive[t] = false;
        barred[t] = true;
        break;
      }
      bool positive = true;
      for (std::size_t c : p) positive = positive && (*z)[c] > 0;
      if (positive) {
        x = *z;
        entered = true;
        break;
      }
      double alpha = 1.0;
      for (std::size_t c : p)
        if ((*z)[c] <= 0) alpha = std::min(alpha, x[c] / (x[c] - (*z)[c]));
      for (std::size_t c = 0; c < a.cols; ++c) x[c] += alpha * ((*z)[c] - x[c]);
      for (std::size_t c : p)
        if (x[c] <= 1e-15 * std::max(1.0, std::abs((*z)[c]))) {
          x[c] = 0;
          passive[c] = false;
        }
    }
    if (entered) std::fill(barred.begin(), barred.end(), false);
  }
  for (std::size_t c = 0; c < x.size(); ++c) x[c] = norm[c] > 0 ? x[c] / norm[c] : 0.0;
  return x;
}

}  // namespace moesim::calibrate

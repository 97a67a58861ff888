#include "moesim/model/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace moesim::model {

void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& work,
                  const std::function<void(std::size_t)>& done, const std::function<bool()>& stop) {
  if (n == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, n));
  std::atomic<std::size_t> next{0}, finished{0};
  std::atomic<bool> halt{false};
  std::mutex mutex;  // guards `failure` and serialises `done`
  std::exception_ptr failure;
  const auto worker = [&] {
    for (;;) {
      if (halt.load()) return;
      const std::size_t k = next.fetch_add(1);
      if (k >= n) return;
      try {
        work(k);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        halt = true;
        return;
      }
      const std::size_t d = finished.fetch_add(1) + 1;
      if (done) {
        std::lock_guard lock(mutex);
        done(d);
      }
      if (stop && stop()) halt = true;
    }
  };
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace moesim::model

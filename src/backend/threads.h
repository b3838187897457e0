// Compute threads for kernels (backend/thread_pool.h). Set once at start-up from -t.
#pragma once

namespace kvlm {

void set_num_threads(int num_threads);  // <= 0: $OMP_NUM_THREADS if set, else all cores
int num_threads();

}  // namespace kvlm

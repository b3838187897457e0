// The CPU's Backend (backend/backend.h): each op is the kernel of the same
// name in backend/cpu (matmul.h, ops.h, attention.h), which picks its SIMD
// path at run time (cpu_path.h) and runs on the compute threads (threads.h).
#pragma once

#include "backend/backend.h"

namespace kvlm {

// The one CPU backend. Stateless, so one instance serves every model and thread.
const Backend& cpu_backend();

}  // namespace kvlm

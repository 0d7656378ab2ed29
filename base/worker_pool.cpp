#include "base/worker_pool.hpp"
// Header-only template; this unit keeps the library non-empty and checks the header compiles alone.

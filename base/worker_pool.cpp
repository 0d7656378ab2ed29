#include "base/worker_pool.hpp"

#include <pthread.h>

namespace changeflow {

void name_this_thread(const std::string& name) {
  // The kernel keeps 15 characters and the terminating zero; a longer name is refused whole.
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace changeflow

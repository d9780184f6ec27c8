#include "kernels/core/cpu_team.h"

#include <omp.h>

#include "kernels/core/error.h"

namespace updraft {

void release_cpu_team() {
  if (omp_get_level() > 0)
    return;  // inside a region (even a one-thread one): the team is in use
  // The initial device is the host: this ends the calling thread's pool only.
  const int rc = omp_pause_resource(omp_pause_soft, omp_get_initial_device());
  UPD_CHECK(rc == 0) << "omp_pause_resource on the host failed (" << rc << ") outside any parallel region";
}

}  // namespace updraft

#include "model/param_spec.h"

namespace pstrain {
namespace model {

int64_t TotalElements(const std::vector<ParamSpec>& params) {
  int64_t total = 0;
  for (const ParamSpec& p : params) total += p.num_elements;
  return total;
}

}  // namespace model
}  // namespace pstrain

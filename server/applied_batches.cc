#include "server/applied_batches.h"

#include <algorithm>

namespace pstrain::server {

bool AppliedBatches::Add(int64_t lease_id, int64_t batch) {
  if (lease_id < settled_below_) return false;
  Lease& lease = leases_[lease_id];
  if (batch < lease.prefix) return false;
  if (batch > lease.prefix) return lease.ahead.insert(batch).second;
  ++lease.prefix;
  while (lease.ahead.erase(lease.prefix) > 0) ++lease.prefix;
  return true;
}

void AppliedBatches::SettleBelow(int64_t lease_id) {
  if (lease_id <= settled_below_) return;
  settled_below_ = lease_id;
  leases_.erase(leases_.begin(), leases_.lower_bound(lease_id));
}

void AppliedBatches::Report(int64_t first_lease_id, int max_leases, AppliedLeases* out) const {
  int n = 0;
  for (auto it = leases_.lower_bound(first_lease_id); it != leases_.end() && n < max_leases; ++it) {
    if (it->second.prefix == 0) continue;
    out->add_lease_ids(it->first);
    out->add_batches(it->second.prefix);
    ++n;
  }
}

AppliedLeases AppliedOnBoth(const AppliedLeases& a, const AppliedLeases& b) {
  AppliedLeases both;
  if (a.data_epoch() != b.data_epoch()) return both;
  both.set_data_epoch(a.data_epoch());
  int i = 0, j = 0;
  while (i < a.lease_ids_size() && j < b.lease_ids_size()) {
    if (a.lease_ids(i) < b.lease_ids(j)) {
      ++i;
    } else if (b.lease_ids(j) < a.lease_ids(i)) {
      ++j;
    } else {
      both.add_lease_ids(a.lease_ids(i));
      both.add_batches(std::min(a.batches(i), b.batches(j)));
      ++i;
      ++j;
    }
  }
  return both;
}

}  // namespace pstrain::server

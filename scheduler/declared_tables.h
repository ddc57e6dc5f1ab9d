// The embedding tables of model declarations (ModelDeclaration.tables, proto/scheduler.proto):
// checking what a worker declares, the tables a job without any adopts from its first accepted
// declaration, and comparing a declaration with the job's tables.
//
//   job declares C1, C2 (dim 16)    worker 0 declares C2, C1 (dim 16)  -> OK (any order)
//                                   worker 1 declares C1 (dim 8), C2   -> INVALID_ARGUMENT "worker 1
//                                       declares table 'C1' with dim 8; the job's table 'C1' has dim 16"
//   job declares none               worker 0 declares user (dim 32)    -> adopted: table 0 'user'
//                                   worker 1 declares user (dim 32)    -> OK
//                                   worker 2 declares nothing          -> OK (says nothing)
//
// A declared table may leave init_bound and optimizer unset: it then takes the job's (when the
// job declares the table) or JobSpec.table_optimizer (when it is adopted). Where it sets them,
// they must be the job's.
//
// Thread-compatible free functions with no shared state.
#ifndef PSTRAIN_SCHEDULER_DECLARED_TABLES_H_
#define PSTRAIN_SCHEDULER_DECLARED_TABLES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/job.pb.h"
#include "proto/scheduler.pb.h"

namespace pstrain {
namespace scheduler {

using TableList = google::protobuf::RepeatedPtrField<TableSpec>;

// OK when the declaration's tables are valid on their own in a job of `job`'s mode, as
// ValidateTables checks a job's (common/table_spec.h); otherwise INVALID_ARGUMENT naming the worker and the field:
// "model declaration from worker 1: tables[2].dim: got 0, expected in [1, 4096]".
absl::Status CheckDeclaredTables(const JobSpec& job, const ModelDeclaration& declaration);

// The tables a job that declares none takes from its first accepted declaration: `declared` in
// its order, an unset optimizer replaced by job.table_optimizer, every optimizer's unset fields
// given their defaults. REQUIRES: CheckDeclaredTables passed.
TableList AdoptDeclaredTables(const JobSpec& job, const TableList& declared);

// OK when `who` (e.g. "worker 2") declares `declared` for a job whose tables are `tables` (with
// their defaults applied): no tables at all, or every one of `tables` exactly once by name, with
// the same dim and, where the declaration sets them, the same init_bound (unset in `tables`:
// 1/sqrt(dim)) and optimizer (compared after defaults). Otherwise INVALID_ARGUMENT naming the
// first difference: "worker 2 declares table 'C27'; the job has no such table (its tables: C1,
// C2)", "worker 2 declares 1 of the job's 2 tables: table 'C2' is missing", "worker 2 declares
// table 'C1' with optimizer {type: SGD lr: 0.1}; the job's table 'C1' has {type: ADAGRAD ...}".
absl::Status MatchDeclaredTables(absl::string_view who, const TableList& declared, const TableList& tables);

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_DECLARED_TABLES_H_

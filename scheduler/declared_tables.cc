#include "scheduler/declared_tables.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/table_spec.h"
#include "google/protobuf/util/message_differencer.h"

namespace pstrain {
namespace scheduler {
namespace {

// The bound rows of `table` start within (EmbeddingTable's rule for an unset one).
float EffectiveInitBound(const TableSpec& table) {
  return table.has_init_bound() ? table.init_bound() : 1.0f / std::sqrt(static_cast<float>(table.dim()));
}

std::string TableNames(const TableList& tables) {
  std::vector<std::string> names;
  for (const TableSpec& t : tables) names.push_back(t.name());
  return absl::StrJoin(names, ", ");
}

const TableSpec* FindTable(const TableList& tables, const std::string& name) {
  for (const TableSpec& t : tables) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

}  // namespace

absl::Status CheckDeclaredTables(const JobSpec& job, const ModelDeclaration& declaration) {
  // The same checks as a job's tables, on a job of the same mode that holds only these (defaults
  // filled in where the declaration leaves a field to the job: the values are checked, not the
  // presence).
  JobSpec tables_only;
  tables_only.set_model(kExternalModel);
  tables_only.set_mode(job.mode());
  *tables_only.mutable_tables() = declaration.tables();
  ApplyTableDefaults(&tables_only);
  if (absl::Status valid = ValidateTables(tables_only); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model declaration from worker ", declaration.worker_rank(), ": ", valid.message()));
  }
  return absl::OkStatus();
}

TableList AdoptDeclaredTables(const JobSpec& job, const TableList& declared) {
  TableList tables = declared;
  for (TableSpec& t : tables) {
    if (!t.has_optimizer()) *t.mutable_optimizer() = job.table_optimizer();
    ApplySparseOptimizerDefaults(t.mutable_optimizer());
    if (!t.has_admission() && job.has_table_admission()) *t.mutable_admission() = job.table_admission();
    if (t.has_admission()) ApplyAdmissionDefaults(t.mutable_admission());
    if (!t.has_eviction() && job.has_table_eviction()) *t.mutable_eviction() = job.table_eviction();
    if (t.has_eviction()) ApplyEvictionDefaults(t.mutable_eviction());
    if (!t.has_row_dtype() && job.table_row_dtype() != TableSpec::FP32) t.set_row_dtype(job.table_row_dtype());
  }
  return tables;
}

absl::Status MatchDeclaredTables(absl::string_view who, const TableList& declared, const TableList& tables) {
  if (declared.empty()) return absl::OkStatus();
  for (const TableSpec& d : declared) {
    const TableSpec* t = FindTable(tables, d.name());
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, " declares table '", d.name(), "'; the job has no such table (",
                       tables.empty() ? "it has no tables" : absl::StrCat("its tables: ", TableNames(tables)), ")"));
    }
    const std::string theirs = absl::StrCat("the job's table '", t->name(), "'");
    if (d.dim() != t->dim()) {
      return absl::InvalidArgumentError(absl::StrCat(who, " declares table '", d.name(), "' with dim ", d.dim(), "; ",
                                                     theirs, " has dim ", t->dim()));
    }
    if (d.has_init_bound()) {
      const float job_bound = EffectiveInitBound(*t);
      // A bound given as 1/sqrt(dim) in another language may differ in the last bits.
      if (std::abs(d.init_bound() - job_bound) > 1e-6f * std::max(1.0f, job_bound)) {
        return absl::InvalidArgumentError(absl::StrCat(who, " declares table '", d.name(), "' with init_bound ",
                                                       d.init_bound(), "; ", theirs, " has ", job_bound,
                                                       t->has_init_bound() ? "" : " (1/sqrt(dim))"));
      }
    }
    if (d.has_optimizer()) {
      SparseOptimizerSpec mine = d.optimizer();
      ApplySparseOptimizerDefaults(&mine);
      if (!google::protobuf::util::MessageDifferencer::Equals(mine, t->optimizer())) {
        return absl::InvalidArgumentError(absl::StrCat(who, " declares table '", d.name(), "' with optimizer {",
                                                       mine.ShortDebugString(), "}; ", theirs, " has {",
                                                       t->optimizer().ShortDebugString(), "}"));
      }
    }
    if (d.has_admission()) {
      AdmissionSpec mine = d.admission();
      ApplyAdmissionDefaults(&mine);
      if (!google::protobuf::util::MessageDifferencer::Equals(mine, t->admission())) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, " declares table '", d.name(), "' with admission ", AdmissionName(mine), " {", mine.ShortDebugString(),
            "}; ", theirs, " has ", AdmissionName(t->admission()), " {", t->admission().ShortDebugString(), "}"));
      }
    }
    if (d.has_eviction()) {
      EvictionSpec mine = d.eviction();
      ApplyEvictionDefaults(&mine);
      if (!google::protobuf::util::MessageDifferencer::Equals(mine, t->eviction())) {
        return absl::InvalidArgumentError(absl::StrCat(who, " declares table '", d.name(), "' with eviction {",
                                                       mine.ShortDebugString(), "}; ", theirs, " has {",
                                                       t->eviction().ShortDebugString(), "}"));
      }
    }
    if (d.has_row_dtype() && d.row_dtype() != RowDtypeOf(*t)) {
      return absl::InvalidArgumentError(absl::StrCat(who, " declares table '", d.name(), "' with row_dtype ",
                                                     RowDtypeName(d.row_dtype()), "; ", theirs, " has ",
                                                     RowDtypeName(RowDtypeOf(*t))));
    }
  }
  // Names are unique on both sides (checked), so equal counts mean the same set.
  if (declared.size() != tables.size()) {
    for (const TableSpec& t : tables) {
      if (FindTable(declared, t.name()) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(who, " declares ", declared.size(), " of the job's ",
                                                       tables.size(), " tables: table '", t.name(), "' is missing"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace scheduler
}  // namespace pstrain

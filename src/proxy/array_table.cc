#include "proxy/array_table.h"

#include "absl/strings/str_cat.h"

namespace switchyard::proxy {

absl::Status Array::Usable() const {
  for (const auto& shard : shards) {
    if (shard == nullptr) continue;
    absl::Status usable = shard->Usable();
    if (!usable.ok()) return usable;
  }
  return absl::OkStatus();
}

absl::Status ArrayTable::Add(uint64_t handle, std::shared_ptr<Array> array) {
  if (handle == 0) return absl::InvalidArgumentError("array handle 0 is invalid");
  if (!arrays_.emplace(handle, std::move(array)).second) {
    return absl::InvalidArgumentError(absl::StrCat("array handle ", handle, " is already in use"));
  }
  return absl::OkStatus();
}

void ArrayTable::AddError(uint64_t handle, absl::Status error) {
  if (handle == 0) return;
  arrays_.insert_or_assign(handle, std::move(error));
}

absl::StatusOr<std::shared_ptr<Array>> ArrayTable::GetEvenIfDeleted(uint64_t handle) const {
  auto it = arrays_.find(handle);
  if (it == arrays_.end())
    return absl::NotFoundError(absl::StrCat("Unknown array handle: ", handle));
  return it->second;
}

absl::StatusOr<std::shared_ptr<Array>> ArrayTable::Get(uint64_t handle) const {
  absl::StatusOr<std::shared_ptr<Array>> array = GetEvenIfDeleted(handle);
  if (array.ok() && (*array)->deleted) {
    return absl::FailedPreconditionError(absl::StrCat("array ", handle, " has been deleted"));
  }
  return array;
}

absl::Status ArrayTable::Remove(uint64_t handle) {
  if (arrays_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("Unknown array handle: ", handle));
  }
  return absl::OkStatus();
}

}  // namespace switchyard::proxy

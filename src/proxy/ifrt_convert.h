#pragma once

// Conversions between IFRT wire types and Switchyard's.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ifrt/ifrt_types.pb.h"
#include "ifrt/status.pb.h"
#include "switchyard/common.pb.h"

namespace switchyard::proxy {

// UNIMPLEMENTED for kinds the workers cannot hold (strings, tokens, sub-byte and
// the newest float types), naming the kind.
absl::StatusOr<DType> FromDTypeProto(const ::xla::ifrt::DTypeProto& proto);
::xla::ifrt::DTypeProto ToDTypeProto(DType dtype);

// INVALID_ARGUMENT for negative dimensions and sizes over the limits (wire_numbers.h).
absl::StatusOr<std::vector<int64_t>> FromShapeProto(const ::xla::ifrt::ShapeProto& proto);
::xla::ifrt::ShapeProto ToShapeProto(const std::vector<int64_t>& dims);

::tensorflow::StatusProto ToStatusProto(const absl::Status& status);
absl::Status FromStatusProto(const ::tensorflow::StatusProto& proto);

void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name, int64_t value);
void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name, bool value);
void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name,
                  const std::string& value);
void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name,
                  const std::vector<int64_t>& value);

}  // namespace switchyard::proxy

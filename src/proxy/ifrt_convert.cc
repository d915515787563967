#include "proxy/ifrt_convert.h"

#include "absl/strings/str_cat.h"
#include "common/wire_numbers.h"

namespace switchyard::proxy {

using ::xla::ifrt::DTypeProto;

absl::StatusOr<DType> FromDTypeProto(const DTypeProto& proto) {
  // IFRT's kinds share XLA's PrimitiveType numbers for every type we hold, and so
  // does switchyard.DType.
  switch (proto.kind()) {
    case DTypeProto::KIND_PRED:
    case DTypeProto::KIND_S8:
    case DTypeProto::KIND_S16:
    case DTypeProto::KIND_S32:
    case DTypeProto::KIND_S64:
    case DTypeProto::KIND_U8:
    case DTypeProto::KIND_U16:
    case DTypeProto::KIND_U32:
    case DTypeProto::KIND_U64:
    case DTypeProto::KIND_F16:
    case DTypeProto::KIND_F32:
    case DTypeProto::KIND_F64:
    case DTypeProto::KIND_C64:
    case DTypeProto::KIND_BF16:
    case DTypeProto::KIND_C128:
    case DTypeProto::KIND_F8E5M2:
    case DTypeProto::KIND_F8E4M3FN:
    case DTypeProto::KIND_F8E4M3B11FNUZ:
    case DTypeProto::KIND_F8E5M2FNUZ:
    case DTypeProto::KIND_F8E4M3FNUZ:
    case DTypeProto::KIND_F8E4M3:
    case DTypeProto::KIND_F8E3M4:
    case DTypeProto::KIND_F8E8M0FNU:
    case DTypeProto::KIND_S4:
    case DTypeProto::KIND_U4:
    case DTypeProto::KIND_S2:
    case DTypeProto::KIND_U2:
    case DTypeProto::KIND_F4E2M1FN:
    case DTypeProto::KIND_TOKEN:
      return static_cast<DType>(proto.kind());
    case DTypeProto::KIND_STRING:
      return STRING;  // numbers differ: IFRT's kind is not an XLA type
    default:
      return absl::UnimplementedError(absl::StrCat("Switchyard does not serve arrays of dtype ",
                                                   DTypeProto::Kind_Name(proto.kind()), " (",
                                                   static_cast<int>(proto.kind()), ")"));
  }
}

DTypeProto ToDTypeProto(DType dtype) {
  DTypeProto proto;
  proto.set_kind(dtype == STRING ? DTypeProto::KIND_STRING : static_cast<DTypeProto::Kind>(dtype));
  return proto;
}

absl::StatusOr<std::vector<int64_t>> FromShapeProto(const ::xla::ifrt::ShapeProto& proto) {
  return CheckedShape(proto.dims(), "array shape");
}

::xla::ifrt::ShapeProto ToShapeProto(const std::vector<int64_t>& dims) {
  ::xla::ifrt::ShapeProto proto;
  proto.mutable_dims()->Add(dims.begin(), dims.end());
  return proto;
}

::tensorflow::StatusProto ToStatusProto(const absl::Status& status) {
  ::tensorflow::StatusProto proto;
  proto.set_code(static_cast<int>(status.code()));
  proto.set_message(std::string(status.message()));
  return proto;
}

absl::Status FromStatusProto(const ::tensorflow::StatusProto& proto) {
  return absl::Status(static_cast<absl::StatusCode>(proto.code()), proto.message());
}

void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name, int64_t value) {
  (*map->mutable_attributes())[name].set_int64_value(value);
}

void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name, bool value) {
  (*map->mutable_attributes())[name].set_bool_value(value);
}

void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name,
                  const std::string& value) {
  (*map->mutable_attributes())[name].set_string_value(value);
}

void SetAttribute(::xla::ifrt::AttributeMapProto* map, const std::string& name,
                  const std::vector<int64_t>& value) {
  auto* list = (*map->mutable_attributes())[name].mutable_int64_list_value();
  list->mutable_elements()->Add(value.begin(), value.end());
}

}  // namespace switchyard::proxy

#include "common/simulated_program.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/limits.h"
#include "common/wire_numbers.h"

namespace switchyard {
namespace {

template <typename T>
absl::Status ParseList(absl::string_view text, int64_t max, absl::string_view what,
                       std::vector<T>* out) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("simulated program: bad ", what, " '", part, "'"));
    }
    if (static_cast<int64_t>(out->size()) >= max) {
      return absl::InvalidArgumentError(
          absl::StrCat("simulated program: more than ", max, " ", what, "s"));
    }
    out->push_back(static_cast<T>(value));
  }
  return absl::OkStatus();
}

absl::Status ParseCount(absl::string_view text, int64_t* out) {
  if (!absl::SimpleAtoi(text, out) || *out < 1 || *out > limits::kDevicesMax) {
    return absl::InvalidArgumentError(absl::StrCat("simulated program: bad count '", text, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeSimulatedProgram(const SimulatedProgram& program) {
  std::string text =
      absl::StrCat("replicas ", program.num_replicas, "\npartitions ", program.num_partitions,
                   "\ndevices ", absl::StrJoin(program.device_ordinals, ","), "\n");
  for (const SimulatedProgram::Output& output : program.outputs) {
    absl::StrAppend(&text, "output ", output.dtype, " ", absl::StrJoin(output.dims, ","), "\n");
  }
  // Last: a name may hold anything but a line break.
  absl::StrAppend(&text, "name ", program.name);
  return text;
}

absl::StatusOr<SimulatedProgram> DecodeSimulatedProgram(absl::string_view text) {
  SimulatedProgram program;
  bool named = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (named) return absl::InvalidArgumentError("simulated program: lines after its name");
    const size_t space = line.find(' ');
    const absl::string_view key = line.substr(0, space);
    const absl::string_view value =
        space == absl::string_view::npos ? absl::string_view() : line.substr(space + 1);
    if (key == "name") {
      program.name = std::string(value);
      named = true;
    } else if (key == "replicas") {
      if (absl::Status s = ParseCount(value, &program.num_replicas); !s.ok()) return s;
    } else if (key == "partitions") {
      if (absl::Status s = ParseCount(value, &program.num_partitions); !s.ok()) return s;
    } else if (key == "devices") {
      if (absl::Status s =
              ParseList(value, limits::kDevicesMax, "device", &program.device_ordinals);
          !s.ok()) {
        return s;
      }
    } else if (key == "output") {
      if (static_cast<int64_t>(program.outputs.size()) >= limits::kExecutableOutputsMax) {
        return absl::InvalidArgumentError("simulated program: too many outputs");
      }
      const size_t gap = value.find(' ');
      SimulatedProgram::Output output;
      if (gap == absl::string_view::npos ||
          !absl::SimpleAtoi(value.substr(0, gap), &output.dtype) || output.dtype <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("simulated program: bad output '", value, "'"));
      }
      if (absl::Status s =
              ParseList(value.substr(gap + 1), limits::kArrayRankMax, "dimension", &output.dims);
          !s.ok()) {
        return s;
      }
      int64_t elements = 1;
      for (int64_t dim : output.dims) {
        absl::StatusOr<int64_t> product =
            CheckedProduct(elements, dim, limits::kArrayElementsMax, "a simulated output");
        if (!product.ok()) return product.status();
        elements = *product;
      }
      program.outputs.push_back(std::move(output));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("simulated program: unknown line '", key, "'"));
    }
  }
  if (!named) return absl::InvalidArgumentError("simulated program: no name");
  if (program.device_ordinals.empty()) {
    return absl::InvalidArgumentError("simulated program: no devices");
  }
  return program;
}

}  // namespace switchyard

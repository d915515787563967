#include "pjrt/ffi.h"

#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "pjrt/c_api.h"
#include "pjrt/ffi_extension.h"
#include "pjrt/plugin.h"
#include "xla/ffi/api/ffi.h"

namespace switchyard::pjrt {
namespace {

namespace xffi = ::xla::ffi;

// What a launch's ExecuteContext carries to routed custom calls.
struct Routed {
  static xffi::TypeId id;  // assigned by the plugin's type registry, once
  FfiCallHandler handler;
};
xffi::TypeId Routed::id = {};
// The ExecuteContext frees the data itself: plugins differ on whether destroying a
// context calls this deleter (the jaxlib 0.11.2 CPU plugin does not), so it does nothing.
const XLA_FFI_TypeInfo kRoutedInfo = {sizeof(XLA_FFI_TypeInfo), nullptr, [](void*) {}};

FfiBuffer ToFfiBuffer(const xffi::AnyBuffer& buffer) {
  FfiBuffer out;
  const auto type = buffer.element_type();
  out.token = type == xffi::DataType::TOKEN;
  // XLA_FFI_DataType numbers types as XLA's PrimitiveType, and so does DType.
  out.dtype = out.token ? DType::kInvalid : static_cast<DType>(static_cast<int>(type));
  auto dims = buffer.dimensions();
  out.dims.assign(dims.begin(), dims.end());
  out.data = buffer.untyped_data();
  if (!out.token) {
    int64_t elements = 1;
    for (int64_t d : out.dims) elements *= d;
    out.size_bytes = static_cast<size_t>(DenseByteSize(out.dtype, elements));
  }
  return out;
}

xffi::Error RoutedCall(Routed* route, xffi::RemainingArgs args, xffi::RemainingRets rets,
                       xffi::Dictionary attrs) {
  FfiCall call;
  auto index = attrs.get<uint64_t>("index");
  if (!index.has_value()) return index.error();
  call.index = *index;
  for (size_t i = 0; i < args.size(); ++i) {
    auto arg = args.get<xffi::AnyBuffer>(i);
    if (!arg.has_value()) return arg.error();
    call.args.push_back(ToFfiBuffer(*arg));
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto ret = rets.get<xffi::AnyBuffer>(i);
    if (!ret.has_value()) return ret.error();
    call.rets.push_back(ToFfiBuffer(**ret));
  }
  absl::Status status = route->handler(call);
  if (status.ok()) return xffi::Error::Success();
  return xffi::Error(static_cast<xffi::ErrorCode>(status.code()), std::string(status.message()));
}

XLA_FFI_DEFINE_HANDLER(
    kRoutedCall, RoutedCall,
    xffi::Ffi::Bind().Ctx<xffi::UserData<Routed>>().RemainingArgs().RemainingRets().Attrs());

const FfiExtension* FindExtension(const PJRT_Api* api) {
  for (const PJRT_Extension_Base* next = api->extension_start; next != nullptr; next = next->next) {
    // Read as a number: newer plugins have extension types our header's enum lacks.
    int type;
    static_assert(sizeof(type) == sizeof(next->type));
    std::memcpy(&type, &next->type, sizeof(type));
    if (type == PJRT_Extension_Type_FFI) return reinterpret_cast<const FfiExtension*>(next);
  }
  return nullptr;
}

const FfiExtension& Extension(const void* extension) {
  return *static_cast<const FfiExtension*>(extension);
}

}  // namespace

ExecuteContext::~ExecuteContext() {
  Args<PJRT_ExecuteContext_Destroy_Args> args;
  args->context = context_;
  (void)SY_PJRT_CALL(api_, ExecuteContext_Destroy, args.get());
}

absl::StatusOr<Ffi> Ffi::Of(const Plugin& plugin) {
  const FfiExtension* extension = FindExtension(plugin.api());
  if (extension == nullptr) {
    return absl::UnimplementedError("the PJRT plugin has no FFI extension");
  }
  if (extension->base.struct_size < sizeof(FfiExtension) ||
      extension->register_handler == nullptr) {
    return absl::UnimplementedError(
        "the PJRT plugin's FFI extension is too old to register custom-call handlers");
  }
  return Ffi(plugin.api(), extension);
}

absl::Status Ffi::RegisterHandler(std::string_view target, std::string_view platform, void* handler,
                                  int api_version) const {
  if (api_version != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "custom-call target '", std::string(target),
        "' is a legacy (untyped) custom call; plugins register typed FFI handlers only"));
  }
  FfiRegisterHandlerArgs args{};
  args.struct_size = sizeof(args);
  args.target_name = target.data();
  args.target_name_size = target.size();
  args.handler = handler;
  args.platform_name = platform.data();
  args.platform_name_size = platform.size();
  absl::Status status = ToStatus(api_, Extension(extension_).register_handler(&args));
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("registering custom-call target '",
                                                    std::string(target), "': ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status Ffi::Route(std::string_view target, std::string_view platform) const {
  static std::once_flag once;
  static absl::Status type_status;
  std::call_once(once, [this] {
    static constexpr std::string_view kName = "switchyard::pjrt::Routed";
    FfiTypeIdRegisterArgs args{};
    args.struct_size = sizeof(args);
    args.type_name = kName.data();
    args.type_name_size = kName.size();
    args.type_info = &kRoutedInfo;
    type_status = ToStatus(api_, Extension(extension_).type_id_register(&args));
    Routed::id.type_id = args.type_id;
  });
  SY_RETURN_IF_ERROR(type_status);
  // Registrations are process-wide; a second worker in the process (tests) routes again.
  static absl::Mutex mutex;
  static auto* routed = new std::set<std::string>();
  absl::MutexLock lock(&mutex);
  const std::string key = absl::StrCat(std::string(platform), "/", std::string(target));
  if (routed->contains(key)) return absl::OkStatus();
  SY_RETURN_IF_ERROR(RegisterHandler(target, platform, reinterpret_cast<void*>(kRoutedCall), 1));
  routed->insert(key);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExecuteContext>> Ffi::NewContext(FfiCallHandler handler) const {
  if (Routed::id.type_id == 0) {
    return absl::FailedPreconditionError("no custom-call target is routed (Ffi::Route)");
  }
  Args<PJRT_ExecuteContext_Create_Args> create;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api_, ExecuteContext_Create, create.get()));
  auto context = std::unique_ptr<ExecuteContext>(new ExecuteContext(api_, create->context));
  FfiUserDataAddArgs add{};
  add.struct_size = sizeof(add);
  add.context = context->handle();
  add.user_data.type_id = Routed::id.type_id;
  auto routed = std::make_shared<Routed>(Routed{std::move(handler)});
  add.user_data.data = routed.get();
  SY_RETURN_IF_ERROR(ToStatus(api_, Extension(extension_).user_data_add(&add)));
  context->data_ = std::move(routed);
  return context;
}

}  // namespace switchyard::pjrt

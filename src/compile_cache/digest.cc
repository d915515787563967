#include "compile_cache/digest.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace switchyard::compile_cache {

struct Sha256::Context {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
};

Sha256::Sha256() : context_(new Context) { EVP_DigestInit_ex(context_->md, EVP_sha256(), nullptr); }

Sha256::~Sha256() {
  EVP_MD_CTX_free(context_->md);
  delete context_;
}

Sha256& Sha256::Update(absl::string_view data) {
  EVP_DigestUpdate(context_->md, data.data(), data.size());
  return *this;
}

Sha256& Sha256::UpdatePart(absl::string_view data) {
  const uint64_t size = data.size();
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(size >> (8 * i));
  return Update(absl::string_view(bytes, 8)).Update(data);
}

std::string Sha256::Raw() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(context_->md, out, &size);
  return std::string(reinterpret_cast<const char*>(out), size);
}

std::string Sha256::Hex() { return absl::BytesToHexString(Raw()); }

std::string Sha256Hex(absl::string_view data) { return Sha256().Update(data).Hex(); }

absl::StatusOr<std::string> Sha256FileHex(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  Sha256 digest;
  std::string buffer(1 << 20, '\0');
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0) {
    digest.Update(absl::string_view(buffer.data(), n));
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return digest.Hex();
}

}  // namespace switchyard::compile_cache

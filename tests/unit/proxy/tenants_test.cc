#include "proxy/tenants.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

TEST(TenantTokensTest, NoTenantsLetsEveryoneIn) {
  TenantTokens tokens;
  EXPECT_FALSE(tokens.required());
  EXPECT_EQ(*tokens.Authenticate(""), "anonymous");
  EXPECT_EQ(*tokens.Authenticate("anything"), "anonymous");
}

TEST(TenantTokensTest, HashIsSha256OfTheToken) {
  // printf %s abc | sha256sum
  EXPECT_EQ(TenantTokens::Hash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TenantTokensTest, AuthenticatesByHash) {
  auto tokens = TenantTokens::Parse(absl::StrCat("# the pool's tenants\n\nalice ",
                                                 TenantTokens::Hash("a-token"), "\n  bob\t",
                                                 TenantTokens::Hash("b-token"), "  # ops\n"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE(tokens->required());
  EXPECT_EQ(tokens->tenants(), 2u);
  EXPECT_EQ(*tokens->Authenticate("a-token"), "alice");
  EXPECT_EQ(*tokens->Authenticate("b-token"), "bob");
  absl::StatusOr<std::string> none = tokens->Authenticate("");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(none.status().message().find("requires a tenant token"), std::string::npos);
  absl::StatusOr<std::string> wrong = tokens->Authenticate("c-token");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.status().message().find("c-token"), std::string::npos);  // never echoed
  // The hash itself is not a token.
  EXPECT_FALSE(tokens->Authenticate(TenantTokens::Hash("a-token")).ok());
}

TEST(TenantTokensTest, RefusesWhatIsNotAHashOrIsAmbiguous) {
  const std::string hash = TenantTokens::Hash("t");
  struct Case {
    std::string text;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {"alice plain-token\n", "line 1: the token must be given as its hash"},
           {"alice sha256:abc\n", "line 1: the token must be given as its hash"},
           {absl::StrCat("\nalice ", hash, " extra\n"), "line 2: expected"},
           {absl::StrCat("al/ice ", hash), "a tenant name"},
           {absl::StrCat("alice ", hash, "\nalice ", TenantTokens::Hash("u")), "named twice"},
           {absl::StrCat("alice ", hash, "\nbob ", hash), "belongs to another tenant"},
       }) {
    absl::StatusOr<TenantTokens> tokens = TenantTokens::Parse(c.text);
    ASSERT_FALSE(tokens.ok()) << c.text;
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(tokens.status().message().find(c.why), std::string::npos) << tokens.status();
  }
  // Upper-case hex is refused too: one spelling a hash, so a file diff shows real changes.
  std::string upper = hash;
  for (size_t i = 7; i < upper.size(); ++i) upper[i] = absl::ascii_toupper(upper[i]);
  EXPECT_FALSE(TenantTokens::Parse("alice " + upper).ok());
}

TEST(TenantTokensTest, LoadNamesTheFile) {
  absl::StatusOr<TenantTokens> missing = TenantTokens::Load("/nonexistent/tokens");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace switchyard::proxy

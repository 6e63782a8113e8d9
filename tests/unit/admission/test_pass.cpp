// The concert_admit pass: fixed vectors (computed independently with Python's
// hmac and base64 modules), every rejection case, and the sliding rule.
#include <doctest/doctest.h>

#include "admission/pass.h"

using namespace concert::admission;

namespace {

constexpr std::string_view kSecret = "concert-test-secret-0123456789abcdef";

PassId sequentialId() {
  PassId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i);
  return id;
}

}  // namespace

TEST_CASE("admit pass: fixed vectors") {
  // python3: base64.urlsafe_b64encode(raw + hmac.new(secret, raw, sha256).digest()[:16]).rstrip(b"=")
  CHECK(mintPass(kSecret, sequentialId(), 1700000000) == "AAECAwQFBgcICQoLDA0ODwAAAABlU_EAuFf8-e5s0AMpbjBCErKSrg");
  PassId ff;
  ff.fill(0xff);
  CHECK(mintPass(kSecret, ff, 4102444800) == "_____________________wAAAAD0hlcA5uDjekIgvhz4MDsCDwdkXw");
  CHECK(mintPass("another-secret-another-secret-0123", sequentialId(), 1700000000) ==
        "AAECAwQFBgcICQoLDA0ODwAAAABlU_EAweG2bDUCUMpSNj9Iis3rtg");
}

TEST_CASE("admit pass: round trip keeps id and expiry") {
  std::string value = mintPass(kSecret, sequentialId(), 1700000000);
  CHECK(value.size() == kPassEncodedChars);
  auto pass = verifyPass(kSecret, value, 1699999999);
  REQUIRE(pass);
  CHECK(pass->id == sequentialId());
  CHECK(pass->expiry == 1700000000);

  auto fresh = mintNewPass(kSecret, 1000, 600);
  REQUIRE(fresh);
  auto verified = verifyPass(kSecret, *fresh, 1000);
  REQUIRE(verified);
  CHECK(verified->expiry == 1600);
  auto other = mintNewPass(kSecret, 1000, 600);
  REQUIRE(other);
  CHECK(verifyPass(kSecret, *other, 1000)->id != verified->id);
}

TEST_CASE("admit pass: rejections") {
  const std::string good = mintPass(kSecret, sequentialId(), 1700000000);
  const int64_t now = 1699999000;
  REQUIRE(verifyPass(kSecret, good, now));

  SUBCASE("expired at exactly expiry and after") {
    CHECK_FALSE(verifyPass(kSecret, good, 1700000000));
    CHECK_FALSE(verifyPass(kSecret, good, 1700000001));
    CHECK(verifyPass(kSecret, good, 1699999999));
  }
  SUBCASE("tampered byte anywhere") {
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = bad[i] == 'A' ? 'B' : 'A';
      CHECK_FALSE(verifyPass(kSecret, bad, now));
    }
  }
  SUBCASE("other secret") {
    CHECK_FALSE(verifyPass("a-completely-different-secret-value!", good, now));
  }
  SUBCASE("empty and garbage") {
    CHECK_FALSE(verifyPass(kSecret, "", now));
    CHECK_FALSE(verifyPass(kSecret, "nope", now));
    CHECK_FALSE(verifyPass(kSecret, std::string(54, 'A'), now));
  }
  SUBCASE("wrong length") {
    CHECK_FALSE(verifyPass(kSecret, good + "A", now));
    CHECK_FALSE(verifyPass(kSecret, good.substr(0, 53), now));
    CHECK_FALSE(verifyPass(kSecret, good + "AA", now));
  }
  SUBCASE("bad alphabet and padding") {
    std::string plus = good;
    plus[10] = '+';
    CHECK_FALSE(verifyPass(kSecret, plus, now));
    std::string slash = good;
    slash[10] = '/';
    CHECK_FALSE(verifyPass(kSecret, slash, now));
    CHECK_FALSE(verifyPass(kSecret, good + "==", now));
    std::string padded = good.substr(0, 52) + "==";
    CHECK_FALSE(verifyPass(kSecret, padded, now));
    std::string space = good;
    space[0] = ' ';
    CHECK_FALSE(verifyPass(kSecret, space, now));
  }
  SUBCASE("non-canonical last character") {
    // 54 chars carry 4 spare bits; the last character of a canonical encoding
    // has them zero. 'g' (32) differs from 'g'-ish values only in spare bits
    // when the canonical one is a multiple of 16.
    char last = good.back();
    auto index = [](char c) -> int {
      std::string_view a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
      return static_cast<int>(a.find(c));
    };
    int v = index(last);
    REQUIRE(v % 16 == 0);
    std::string bad = good;
    bad.back() = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[v + 1];
    CHECK_FALSE(verifyPass(kSecret, bad, now));
  }
}

TEST_CASE("admit pass: sliding rule") {
  const int64_t ttl = 600;
  const int64_t now = 1'000'000;
  const PassId id = sequentialId();

  SUBCASE("more than half left: nothing") {
    auto pass = verifyPass(kSecret, mintPass(kSecret, id, now + 301), now);
    REQUIRE(pass);
    CHECK_FALSE(slidePass(kSecret, pass, now, ttl, true));
  }
  SUBCASE("exactly half left: re-minted with the same id") {
    auto pass = verifyPass(kSecret, mintPass(kSecret, id, now + 300), now);
    auto slid = slidePass(kSecret, pass, now, ttl, true);
    REQUIRE(slid);
    auto again = verifyPass(kSecret, *slid, now);
    REQUIRE(again);
    CHECK(again->id == id);
    CHECK(again->expiry == now + ttl);
  }
  SUBCASE("a quarter left (minted 3/4 ttl ago)") {
    auto pass = verifyPass(kSecret, mintPass(kSecret, id, now + 150), now);
    auto slid = slidePass(kSecret, pass, now, ttl, false);
    REQUIRE(slid);
    CHECK(verifyPass(kSecret, *slid, now)->id == id);
  }
  SUBCASE("missing: mint only when asked") {
    CHECK_FALSE(slidePass(kSecret, std::nullopt, now, ttl, false));
    auto fresh = slidePass(kSecret, std::nullopt, now, ttl, true);
    REQUIRE(fresh);
    auto pass = verifyPass(kSecret, *fresh, now);
    REQUIRE(pass);
    CHECK(pass->expiry == now + ttl);
  }
}

TEST_CASE("base64url helpers") {
  const uint8_t bytes[] = {0xfb, 0xff, 0xbf};
  CHECK(base64UrlEncode(bytes, 3) == "-_-_");
  CHECK(base64UrlEncode(bytes, 1) == "-w");
  CHECK(base64UrlEncode(bytes, 2) == "-_8");
  CHECK(base64UrlDecode("-w") == std::string("\xfb", 1));
  CHECK_FALSE(base64UrlDecode("-x"));  // spare bits set
  CHECK_FALSE(base64UrlDecode("A"));
  CHECK_FALSE(base64UrlDecode("-w=="));
}

TEST_CASE("admit pass: an expired pass of ours is told apart from a forgery") {
  const std::string pass = mintPass(kSecret, sequentialId(), 1700000000);
  CHECK(checkPass(kSecret, pass, 1699999999).check == PassCheck::Valid);
  const CheckedPass late = checkPass(kSecret, pass, 1700000000);
  CHECK(late.check == PassCheck::Expired);
  CHECK(late.pass.expiry == 1700000000);
  CHECK(late.pass.id == sequentialId());
  // Another key, a flipped MAC byte, a flipped expiry byte, junk: forged.
  CHECK(checkPass("another-secret-another-secret-0123", pass, 1).check == PassCheck::Forged);
  std::string tampered = pass;
  tampered[40] = tampered[40] == 'A' ? 'B' : 'A';
  CHECK(checkPass(kSecret, tampered, 1).check == PassCheck::Forged);
  tampered = pass;
  tampered[25] = tampered[25] == 'A' ? 'B' : 'A';
  CHECK(checkPass(kSecret, tampered, 1).check == PassCheck::Forged);
  CHECK(checkPass(kSecret, "", 1).check == PassCheck::Forged);
  CHECK(checkPass(kSecret, std::string(54, 'A'), 1).check == PassCheck::Forged);
}

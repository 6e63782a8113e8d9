// Fuzz target: the concert_admit pass (verifyPass, base64UrlDecode,
// base64UrlEncode, mintPass, slidePass).
//
// The whole input is first tried as a cookie value, as a client can send
// anything. Properties:
//   * strict base64url: whatever decodes re-encodes to exactly the input
//     (one spelling per byte string), and decoding never yields more than
//     3/4 of the text;
//   * verifyPass accepts only the canonical 54-character spelling of a pass
//     minted under the same secret, never after its expiry, never under a
//     different secret;
//   * a pass minted from input-chosen id and expiry verifies back to the
//     same id and expiry while unexpired, and not under another secret;
//   * one flipped character of a genuine pass is always refused.
#include <cstring>
#include <string>

#include "admission/pass.h"
#include "fuzz_target.h"

namespace concert::fuzz {
namespace {

constexpr std::string_view kSecret = "concert-fuzz-secret-0123456789abcdef";
constexpr std::string_view kOtherSecret = "another-secret-of-at-least-32-bytes!!";
constexpr int64_t kNow = 1'750'000'000;  // a fixed "now": the target must be deterministic

}  // namespace

int fuzzPass(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  std::optional<std::string> decoded = admission::base64UrlDecode(text);
  if (decoded) {
    FUZZ_ASSERT(decoded->size() == text.size() * 3 / 4);
    FUZZ_ASSERT(admission::base64UrlEncode(reinterpret_cast<const uint8_t*>(decoded->data()), decoded->size()) == text);
  }

  std::optional<admission::AdmitPass> pass = admission::verifyPass(kSecret, text, kNow);
  if (pass) {
    FUZZ_ASSERT(text.size() == admission::kPassEncodedChars);
    FUZZ_ASSERT(pass->expiry > kNow);
    FUZZ_ASSERT(admission::mintPass(kSecret, pass->id, pass->expiry) == text);
  }
  FUZZ_ASSERT(!admission::verifyPass(kOtherSecret, text, kNow) || !pass);

  // Mint from input-chosen fields: 16 id bytes, then an expiry offset.
  if (size >= admission::kPassIdBytes + 4) {
    admission::PassId id;
    std::memcpy(id.data(), data, id.size());
    int32_t offset;
    std::memcpy(&offset, data + id.size(), sizeof offset);
    int64_t expiry = kNow + offset;
    std::string minted = admission::mintPass(kSecret, id, expiry);
    FUZZ_ASSERT(minted.size() == admission::kPassEncodedChars);
    std::optional<admission::AdmitPass> back = admission::verifyPass(kSecret, minted, kNow);
    FUZZ_ASSERT(back.has_value() == (expiry > kNow));
    if (back) {
      FUZZ_ASSERT(back->id == id && back->expiry == expiry);
      FUZZ_ASSERT(!admission::verifyPass(kSecret, minted, expiry));  // expired at exactly its expiry
      // Realistic lifetimes only: a verified pass was minted by us with now + admit-ttl.
      std::optional<std::string> slid = admission::slidePass(kSecret, back, kNow, 600, false);
      if (slid) {
        std::optional<admission::AdmitPass> slid_pass = admission::verifyPass(kSecret, *slid, kNow);
        FUZZ_ASSERT(slid_pass && slid_pass->id == id && slid_pass->expiry == kNow + 600);
      }
    }
    FUZZ_ASSERT(!admission::verifyPass(kOtherSecret, minted, kNow));
    size_t flip = static_cast<size_t>(data[size - 1]) % minted.size();
    std::string tampered = minted;
    tampered[flip] = tampered[flip] == 'A' ? 'B' : 'A';
    FUZZ_ASSERT(!admission::verifyPass(kSecret, tampered, kNow));
  }
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzPass)

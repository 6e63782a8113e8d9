// The body of POST /_room/cap, {"cap": N}, read the way the original's Go
// handler read it (json.Unmarshal into struct { Cap int32 `json:"cap"` }):
// a missing or null "cap" is 0, unknown keys are ignored, the key matches
// case-insensitively, the last one wins, and errors carry Go's wording.
// Where Go reads on, nlohmann-json refuses: a string with invalid UTF-8 or a
// lone surrogate escape is a syntax error here, and a number beyond a
// double's range ends the reading ("json: number 1e999 is out of range",
// or Go's type error when it is the value of "cap").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace concert::admission {

struct CapBody {
  int32_t cap = 0;
  std::string error;  // non-empty: answered 400 {"error": error}
};

CapBody parseCapBody(std::string_view body);

}  // namespace concert::admission
